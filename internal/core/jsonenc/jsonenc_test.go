package jsonenc

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestAppendStringRoundTrips(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote`, `back\slash`, "nl\nx", "tab\t", "ctl\x01\x1f", "ünïcode ✓", "</script>"} {
		b := AppendString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil || got != s {
			t.Errorf("%q: encoded %s, decoded %q, err %v", s, b, got, err)
		}
		if fromBytes := AppendString([]byte("x"), []byte(s)); string(fromBytes) != "x"+string(b) {
			t.Errorf("%q: from bytes %s, from a string %s", s, fromBytes[1:], b)
		}
	}
}

// hostile is text with every character encoding/json treats specially: the
// HTML ones, quotes, a backslash, control characters and the JavaScript
// line separators.
const hostile = "<script>&amp;</script> \"q\" \\ \x00\x01\x1f\n\t\u2028\u2029 ✓"

// TestMarshalKeepsHTML: Marshal writes <, > and & as they are, in strings
// and inside a json.RawMessage, and what it writes decodes to the value it
// was given.
func TestMarshalKeepsHTML(t *testing.T) {
	type rec struct {
		S   string          `json:"s"`
		Raw json.RawMessage `json:"raw"`
		M   map[string]string
	}
	raw, _ := json.Marshal(map[string]string{"h": hostile}) // escaped: Marshal must not add to it
	rawLiteral := json.RawMessage(`{"h":"<&>","n":[1, 2]}`)
	for _, in := range []rec{
		{S: hostile, Raw: rawLiteral, M: map[string]string{hostile: hostile}},
		{S: "", Raw: json.RawMessage(raw)},
	} {
		b, err := Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, esc := range []string{`\u003c`, `\u003e`, `\u0026`} {
			if in.S != "" && bytes.Contains(b, []byte(esc)) {
				t.Errorf("Marshal wrote %s: %s", esc, b)
			}
		}
		if in.S != "" && (!bytes.Contains(b, []byte(`<script>&amp;</script>`)) || !bytes.Contains(b, []byte(`"raw":{"h":"<&>","n":[1,2]}`))) {
			t.Errorf("Marshal did not keep the HTML characters literal: %s", b)
		}
		if b[len(b)-1] == '\n' {
			t.Errorf("Marshal ends in a newline")
		}
		var got rec
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if got.S != in.S || got.M[hostile] != in.M[hostile] || !json.Valid(got.Raw) {
			t.Errorf("round trip: got %+v, want %+v", got, in)
		}
		std, _ := json.Marshal(in)
		if len(b) > len(std) {
			t.Errorf("Marshal wrote %d bytes, json.Marshal %d: it must never be longer", len(b), len(std))
		}
	}
}
