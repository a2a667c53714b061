package inputformat

import (
	"strconv"
	"unicode/utf8"

	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/internal/core/jsonenc"
)

// build writes the envelope from the members' sources, appending to dst:
// the members in a fixed order, each value converted as the member needs
// (appendString, appendVersion, appendPayload). What the envelope's own
// rules check (lengths, UTF-8 of escapes, RFC 3339, the version's range,
// I-JSON) is left to envelope.DecodeInto, so those rules and the
// fingerprint stay in one place; build checks only what it must to write
// JSON and to say where a bad value came from.
func (v *view) build(dst []byte) ([]byte, error) {
	out := append(dst, '{')
	n := 0
	for m := member(0); m < nMembers; m++ {
		if v.d.fields[m].kind == srcNone {
			continue
		}
		val, err := v.resolve(m)
		if err != nil {
			return nil, err
		}
		if val.kind == kindNone || (!val.text && val.kind == kindNull) {
			if isRequired(m) {
				return nil, &envelope.Error{Field: m.String(), Msg: "required field is missing: nothing at " + v.describe(m)}
			}
			continue // absent, as a null optional member is in an envelope
		}
		if n > 0 {
			out = append(out, ',')
		}
		n++
		out = append(out, memberKeys[m]...)
		var msg string
		switch m {
		case mAggregateVersion:
			out, msg = appendVersion(out, val)
		case mPayload:
			out, msg = appendPayload(out, val)
		default:
			out, msg = appendString(out, val)
		}
		if msg != "" {
			return nil, &envelope.Error{Field: m.String(), Msg: msg + " (" + v.describe(m) + ")"}
		}
	}
	return append(out, '}'), nil
}

// isStringLiteral reports whether text is one JSON string literal.
func isStringLiteral(b []byte) bool {
	return len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' && checkJSON(b, 1) == ""
}

// appendString writes a string member: a JSON string as it is, an integer
// as its digits (numeric ids are common in other shapes), text as a JSON
// string (unquoted first when it is a JSON string literal).
func appendString(out []byte, v value) ([]byte, string) {
	switch {
	case v.text:
		if v.quoted && isStringLiteral(v.b) {
			return append(out, v.b...), ""
		}
		if !utf8.Valid(v.b) {
			return out, "not valid UTF-8"
		}
		return jsonenc.AppendString(out, v.b), ""
	case v.kind == kindString:
		return append(out, v.b...), ""
	case v.kind == kindNumber && isInteger(v.b):
		out = append(out, '"')
		out = append(out, v.b...)
		return append(out, '"'), ""
	case v.kind == kindNumber:
		return out, "must be a string or an integer, got the number " + string(v.b)
	}
	return out, "must be a string, got " + v.kind.String()
}

func isInteger(num []byte) bool {
	for _, c := range num {
		if c == '.' || c == 'e' || c == 'E' {
			return false
		}
	}
	return true
}

// appendVersion writes aggregateVersion: a JSON number as it is (the
// envelope checks it is an integer >= 1), or a string holding a decimal
// integer (the CloudEvents sequence extension, protojson's int64, a
// header) as that number.
func appendVersion(out []byte, v value) ([]byte, string) {
	var s []byte
	switch {
	case v.text && v.quoted && isStringLiteral(v.b):
		s, _ = unescape(nil, v.b)
	case v.text:
		s = v.b
	case v.kind == kindNumber:
		return append(out, v.b...), ""
	case v.kind == kindString:
		var ok bool
		if s, ok = unescape(nil, v.b); !ok {
			return out, "contains an unpaired UTF-16 surrogate escape"
		}
	default:
		return out, "must be an integer, got " + v.kind.String()
	}
	if len(s) == 0 {
		return out, "must be a decimal integer, got \"\""
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return out, "must be a decimal integer, got " + strconv.Quote(string(s))
		}
	}
	n, err := strconv.ParseInt(string(s), 10, 64)
	if err != nil {
		return out, "must be a decimal integer that fits int64, got " + strconv.Quote(string(s))
	}
	return strconv.AppendInt(out, n, 10), ""
}

// appendPayload writes the payload: JSON as it is; text as JSON when it is
// JSON, else as a JSON string.
func appendPayload(out []byte, v value) ([]byte, string) {
	if !v.text || checkJSON(v.b, envelope.MaxDepth-1) == "" {
		return append(out, v.b...), ""
	}
	if !utf8.Valid(v.b) {
		return out, "not valid UTF-8"
	}
	return jsonenc.AppendString(out, v.b), ""
}
