package inputformat

import (
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// kind is the JSON type of a located value; kindNone means nothing there.
type kind uint8

const (
	kindNone kind = iota
	kindObject
	kindArray
	kindString
	kindNumber
	kindBool
	kindNull
)

func (k kind) String() string {
	switch k {
	case kindObject:
		return "an object"
	case kindArray:
		return "an array"
	case kindString:
		return "a string"
	case kindNumber:
		return "a number"
	case kindBool:
		return "a boolean"
	case kindNull:
		return "null"
	}
	return "nothing"
}

func kindOf(c byte) kind {
	switch {
	case c == '{':
		return kindObject
	case c == '[':
		return kindArray
	case c == '"':
		return kindString
	case c == 't' || c == 'f':
		return kindBool
	case c == 'n':
		return kindNull
	}
	return kindNumber
}

// checkJSON reports why data is not exactly one JSON value (RFC 8259, with
// optional surrounding whitespace) of valid UTF-8 nesting at most maxDepth
// levels, or "" when it is. The source documents of every format pass here
// first, so the walkers below (skip, lookup) may assume well-formed input.
func checkJSON(data []byte, maxDepth int) string {
	if !utf8.Valid(data) {
		return "not valid UTF-8"
	}
	v := validator{data: data, maxDepth: maxDepth}
	v.ws()
	if v.pos == len(data) {
		return "not JSON: empty"
	}
	v.value(1)
	if v.err == "" {
		v.ws()
		if v.pos != len(data) {
			v.fail("data after the JSON value")
		}
	}
	return v.err
}

// validator is a recursive-descent JSON grammar check. It stops at the
// first error; recursion is bounded by maxDepth.
type validator struct {
	data     []byte
	pos      int
	maxDepth int
	err      string
}

func (v *validator) fail(msg string) {
	if v.err == "" {
		v.err = fmt.Sprintf("not JSON: %s at offset %d", msg, v.pos)
	}
}

func (v *validator) ws() {
	for v.pos < len(v.data) {
		switch v.data[v.pos] {
		case ' ', '\t', '\n', '\r':
			v.pos++
		default:
			return
		}
	}
}

func (v *validator) peek() byte {
	if v.pos < len(v.data) {
		return v.data[v.pos]
	}
	return 0
}

func (v *validator) value(depth int) {
	switch c := v.peek(); {
	case c == '{' || c == '[':
		if depth > v.maxDepth {
			v.err = fmt.Sprintf("nesting deeper than %d levels", v.maxDepth)
			return
		}
		v.container(c, depth)
	case c == '"':
		v.str()
	case c == '-' || (c >= '0' && c <= '9'):
		v.number()
	default:
		v.literal()
	}
}

// container checks an object or array whose opening byte is c.
func (v *validator) container(c byte, depth int) {
	closer := byte(']')
	if c == '{' {
		closer = '}'
	}
	v.pos++
	v.ws()
	if v.peek() == closer {
		v.pos++
		return
	}
	for v.err == "" {
		if c == '{' {
			if v.peek() != '"' {
				v.fail("expected a member name")
				return
			}
			if v.str(); v.err != "" {
				return
			}
			v.ws()
			if v.peek() != ':' {
				v.fail("expected ':'")
				return
			}
			v.pos++
			v.ws()
		}
		if v.value(depth + 1); v.err != "" {
			return
		}
		v.ws()
		switch v.peek() {
		case ',':
			v.pos++
			v.ws()
		case closer:
			v.pos++
			return
		default:
			v.fail("expected ',' or '" + string(closer) + "'")
		}
	}
}

func (v *validator) str() {
	v.pos++ // opening quote
	for v.pos < len(v.data) {
		c := v.data[v.pos]
		switch {
		case c == '"':
			v.pos++
			return
		case c == '\\':
			v.pos++
			switch v.peek() {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				v.pos++
			case 'u':
				if v.pos+5 > len(v.data) || !isHex4(v.data[v.pos+1:v.pos+5]) {
					v.fail("bad \\u escape")
					return
				}
				v.pos += 5
			default:
				v.fail("bad escape")
				return
			}
		case c < 0x20:
			v.fail("control character in a string")
			return
		default:
			v.pos++
		}
	}
	v.fail("unterminated string")
}

func (v *validator) number() {
	if v.peek() == '-' {
		v.pos++
	}
	switch {
	case v.peek() == '0':
		v.pos++
	case v.peek() >= '1' && v.peek() <= '9':
		v.digits()
	default:
		v.fail("bad number")
		return
	}
	if v.peek() == '.' {
		v.pos++
		if !v.digits() {
			v.fail("bad number")
			return
		}
	}
	if c := v.peek(); c == 'e' || c == 'E' {
		v.pos++
		if c := v.peek(); c == '+' || c == '-' {
			v.pos++
		}
		if !v.digits() {
			v.fail("bad number")
		}
	}
}

func (v *validator) digits() bool {
	start := v.pos
	for v.pos < len(v.data) && v.data[v.pos] >= '0' && v.data[v.pos] <= '9' {
		v.pos++
	}
	return v.pos > start
}

func (v *validator) literal() {
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(v.data)-v.pos >= len(lit) && string(v.data[v.pos:v.pos+len(lit)]) == lit {
			v.pos += len(lit)
			return
		}
	}
	v.fail("unexpected character")
}

func isHex4(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// The walkers below run on documents checkJSON accepted.

func skipWS(d []byte, i int) int {
	for i < len(d) && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at d[i] ('"'),
// and whether it contains escapes.
func skipString(d []byte, i int) (end int, escaped bool) {
	for i++; ; i++ {
		switch d[i] {
		case '"':
			return i + 1, escaped
		case '\\':
			escaped = true
			i++ // the escaped byte; \uXXXX's hex digits are plain bytes
		}
	}
}

// skipValue returns the index after the value starting at d[i].
func skipValue(d []byte, i int) int {
	switch d[i] {
	case '"':
		end, _ := skipString(d, i)
		return end
	case '{', '[':
		depth := 0
		for ; ; i++ {
			switch d[i] {
			case '"':
				i, _ = skipString(d, i)
				i--
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
	default: // number or literal: up to the next delimiter
		for i < len(d) {
			switch d[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// unescape appends the decoded content of the JSON string token raw
// (including its quotes) to dst. ok is false for an escape that leaves an
// unpaired UTF-16 surrogate, which has no UTF-8 form.
func unescape(dst, raw []byte) (_ []byte, ok bool) {
	s := raw[1 : len(raw)-1]
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		i++
		switch s[i] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hexRune(s[i+1 : i+5])
			i += 4
			if utf16.IsSurrogate(r) {
				if r >= 0xDC00 || i+6 >= len(s) || s[i+1] != '\\' || s[i+2] != 'u' {
					return dst, false
				}
				r2 := hexRune(s[i+3 : i+7])
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return dst, false
				}
				i += 6
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, s[i])
		}
	}
	return dst, true
}

func hexRune(h []byte) rune {
	n, _ := strconv.ParseUint(string(h), 16, 32) // no allocation: the conversion does not escape
	return rune(n)
}
