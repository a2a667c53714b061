package envelope

// JSON strings for the canonical form: RFC 8785's UTF-16 member order,
// decoding escapes (with the unpaired-surrogate check I-JSON requires) and
// the canonical escaping of RFC 8785 §3.2.2.2.

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// compareUTF16 orders two valid UTF-8 strings by their UTF-16 code units, as
// RFC 8785 §3.2.3 requires. That is byte order, except that a supplementary
// character (a surrogate pair, 0xD800–0xDBFF first) sorts before
// U+E000–U+FFFF, whereas in UTF-8 it sorts after.
func compareUTF16(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return len(a) - len(b)
	}
	if a[i] < 0x80 || b[i] < 0x80 {
		// An ASCII byte here is at a character boundary in both strings
		// (the prefixes are equal), and it is below any non-ASCII unit.
		return int(a[i]) - int(b[i])
	}
	for i > 0 && !utf8.RuneStart(a[i]) {
		i-- // back up to the start of the differing character
	}
	ra, _ := utf8.DecodeRune(a[i:])
	rb, _ := utf8.DecodeRune(b[i:])
	ua, ub := firstUnit(ra), firstUnit(rb)
	if ua != ub {
		return int(ua) - int(ub)
	}
	return int(ra) - int(rb) // same high surrogate: low surrogates follow code point order
}

func firstUnit(r rune) rune {
	if r >= 0x10000 {
		hi, _ := utf16.EncodeRune(r)
		return hi
	}
	return r
}

// appendUnescaped appends the decoded content of a syntactically valid JSON
// string (without quotes). ok is false if a \u escape leaves an unpaired
// UTF-16 surrogate, which has no UTF-8 form.
func appendUnescaped(dst, raw []byte) (_ []byte, ok bool) {
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\\')
		if i < 0 {
			return append(dst, raw...), true
		}
		dst = append(dst, raw[:i]...)
		r, n := decodeEscape(raw[i:])
		if r < 0 {
			return dst, false
		}
		dst = utf8.AppendRune(dst, r)
		raw = raw[i+n:]
	}
	return dst, true
}

// decodeEscape decodes the escape at the start of raw (already validated by
// scanString), combining a \uXXXX\uXXXX surrogate pair. It returns the rune
// and the bytes consumed, or r < 0 for an unpaired surrogate.
func decodeEscape(raw []byte) (r rune, n int) {
	switch raw[1] {
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		r = hex4(raw[2:6])
		if !utf16.IsSurrogate(r) {
			return r, 6
		}
		if r < 0xDC00 && len(raw) >= 12 && raw[6] == '\\' && raw[7] == 'u' {
			if r2 := hex4(raw[8:12]); r2 >= 0xDC00 && r2 <= 0xDFFF {
				return utf16.DecodeRune(r, r2), 12
			}
		}
		return -1, 6
	default: // '"', '\\', '/'
		return rune(raw[1]), 2
	}
}

func hex4(b []byte) rune {
	return rune(hexVal[b[0]])<<12 | rune(hexVal[b[1]])<<8 | rune(hexVal[b[2]])<<4 | rune(hexVal[b[3]])
}

// pairedSurrogates reports whether the \u escapes in the content of a
// syntactically valid JSON string leave no unpaired UTF-16 surrogate: the
// check appendCanonicalEscaped makes, without producing output.
func pairedSurrogates(raw []byte) bool {
	for {
		i := bytes.IndexByte(raw, '\\')
		if i < 0 {
			return true
		}
		r, n := decodeEscape(raw[i:])
		if r < 0 {
			return false
		}
		raw = raw[i+n:]
	}
}

// appendCanonicalEscaped appends, with quotes, the RFC 8785 form of the
// content of a syntactically valid JSON string that contains escapes, in one
// pass: unescaped runs are copied (they cannot contain anything JCS
// escapes), and each escape is replaced by the canonical spelling of the
// character it denotes. ok is false for an unpaired surrogate.
func appendCanonicalEscaped(dst, raw []byte) (_ []byte, ok bool) {
	dst = append(dst, '"')
	ok = true
	for len(raw) > 0 {
		i := bytes.IndexByte(raw, '\\')
		if i < 0 {
			dst = append(dst, raw...)
			break
		}
		dst = append(dst, raw[:i]...)
		r, n := decodeEscape(raw[i:])
		if r < 0 {
			ok = false
			r = utf8.RuneError
		}
		dst = appendCanonicalRune(dst, r)
		raw = raw[i+n:]
	}
	return append(dst, '"'), ok
}

// appendCanonicalString appends s as an RFC 8785 string: only '"', '\\' and
// control characters are escaped, with the short forms where JSON has them
// and lower-case \u00xx otherwise; everything else is copied as UTF-8.
func appendCanonicalString[S ~string | ~[]byte](dst []byte, s S) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		if plainStringByte[s[i]] {
			continue
		}
		dst = append(dst, s[start:i]...)
		dst = appendCanonicalRune(dst, rune(s[i]))
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// shortEscapes maps the characters RFC 8785 escapes with two characters to
// the second one; the other control characters take \u00XX.
var shortEscapes = [...]byte{'"': '"', '\\': '\\', '\b': 'b', '\f': 'f', '\n': 'n', '\r': 'r', '\t': 't'}

// appendCanonicalRune appends r as it stands in a canonical string:
// escaped if RFC 8785 requires, as UTF-8 otherwise.
func appendCanonicalRune(dst []byte, r rune) []byte {
	if r >= 0 && r < rune(len(shortEscapes)) && shortEscapes[r] != 0 {
		return append(dst, '\\', shortEscapes[r])
	}
	if r < 0x20 {
		const hex = "0123456789abcdef"
		return append(dst, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xF])
	}
	return utf8.AppendRune(dst, r)
}
