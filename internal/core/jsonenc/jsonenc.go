// Package jsonenc is the one way the worker encodes JSON that reaches Pebble,
// a changelog or an output topic: AppendString for the hand-built records
// on the hot path (projection records, intents), Marshal for the rest
// (ledger entries, command records, receipts, ingress headers).
//
// Invariant: nothing here escapes HTML. encoding/json's Marshal writes <, >
// and & as \u003c, \u003e and \u0026 – six bytes for one, also inside a
// json.RawMessage – which let an event of 200 KB of '<' become a 1.2 MB
// ledger record that the broker refused, stopping the executor for good
// (issue 22; docs/design.md#nothing-dropped-silently). Our records are
// read by Kafka consumers, not embedded in HTML pages, so the escaping buys
// nothing and costs a size the processor's too-large check cannot see.
// HTTP answers and terminal output (package ingress's responses, the CLI)
// may keep encoding/json's defaults: they are not records.
package jsonenc

import (
	"bytes"
	"encoding/json"
)

// Marshal is json.Marshal without HTML escaping: the same bytes, except
// that <, > and & (and U+2028, U+2029 inside a json.RawMessage) are written
// as they are.
func Marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	// Encode ends the value with a newline; Marshal does not.
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// AppendString appends s (a string or bytes) as a JSON string. Callers pass
// validated UTF-8 (decoded envelope fields, parsed JSON), so only quotes,
// backslashes and control characters need escaping.
func AppendString[S ~string | ~[]byte](b []byte, s S) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
