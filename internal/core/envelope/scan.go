package envelope

import (
	"encoding/binary"
	"fmt"
)

// scanner is the JSON lexer shared by the top-level decoder and the payload
// canonicaliser. It works on the raw bytes, which decode has already checked
// to be valid UTF-8, so only ASCII bytes ever need a closer look.
type scanner struct {
	data []byte
	pos  int
}

// syntaxErr reports a grammar violation at the current position. Offsets are
// relative to the slice being scanned (the record value, on the decode path).
func (s *scanner) syntaxErr(what string) *Error {
	if s.pos >= len(s.data) {
		return &Error{"value", "not JSON: unexpected end of input"}
	}
	return &Error{"value", fmt.Sprintf("not JSON: %s at offset %d", what, s.pos)}
}

func depthErr(field string) *Error {
	return &Error{field, fmt.Sprintf("nested deeper than %d levels", MaxDepth)}
}

// peek returns the current byte, or 0 at the end of input (0 never starts a
// valid token, so callers need no separate bounds check).
func (s *scanner) peek() byte {
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

func (s *scanner) skipWS() {
	// Fast path: compact JSON, as most producers write it, has no whitespace.
	if s.pos < len(s.data) && s.data[s.pos] > ' ' {
		return
	}
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// expectEnd accepts only trailing whitespace.
func (s *scanner) expectEnd() *Error {
	s.skipWS()
	if s.pos != len(s.data) {
		return &Error{"value", fmt.Sprintf("not JSON: unexpected data after the top-level value at offset %d", s.pos)}
	}
	return nil
}

func isDigit(c byte) bool { return c-'0' < 10 }

// plainStringByte marks bytes that may appear unescaped in a JSON string and
// need no attention: everything but control characters, '"' and '\\'.
var plainStringByte = func() (t [256]bool) {
	for i := 0x20; i < 256; i++ {
		t[i] = i != '"' && i != '\\'
	}
	return t
}()

var hexVal = func() (t [256]int8) {
	for i := range t {
		t[i] = -1
	}
	for i := 0; i < 10; i++ {
		t['0'+i] = int8(i)
	}
	for i := 0; i < 6; i++ {
		t['a'+i] = int8(10 + i)
		t['A'+i] = int8(10 + i)
	}
	return t
}()

// scanString validates the string starting at the opening quote under s.pos
// and moves past the closing quote. It returns the bounds of the content
// between the quotes and whether it contains any escape; content without
// escapes is its own decoded value and is already in canonical form.
func (s *scanner) scanString() (start, end int, escaped bool, err *Error) {
	data := s.data
	i := s.pos + 1
	start = i
	for {
		// Skip 8 plain bytes at a time while no byte of the word is '"',
		// '\\' or a control character (SWAR: the classic has-zero-byte test
		// applied to w^'"', w^'\\' and w-0x20; it has no false negatives, and
		// a false positive only sends us to the byte loop).
		for i+8 <= len(data) {
			w := binary.LittleEndian.Uint64(data[i:])
			const ones, highs = 0x0101010101010101, 0x8080808080808080
			q, b := w^(ones*'"'), w^(ones*'\\')
			special := ((q - ones) &^ q) | ((b - ones) &^ b) | ((w - ones*0x20) &^ w)
			if special&highs != 0 {
				break
			}
			i += 8
		}
		for i < len(data) && plainStringByte[data[i]] {
			i++
		}
		if i >= len(data) {
			s.pos = i
			return 0, 0, false, s.syntaxErr("unterminated string")
		}
		switch c := data[i]; {
		case c == '"':
			s.pos = i + 1
			return start, i, escaped, nil
		case c == '\\':
			escaped = true
			if i+1 >= len(data) {
				s.pos = len(data)
				return 0, 0, false, s.syntaxErr("unterminated string")
			}
			switch data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				for k := i + 2; k < i+6; k++ {
					if k >= len(data) || hexVal[data[k]] < 0 {
						s.pos = k
						return 0, 0, false, s.syntaxErr("invalid \\u escape in a string")
					}
				}
				i += 6
			default:
				s.pos = i
				return 0, 0, false, s.syntaxErr("invalid escape in a string")
			}
		default:
			s.pos = i
			return 0, 0, false, s.syntaxErr("control character in a string")
		}
	}
}

// scanNumber validates the number under s.pos (RFC 8259 grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?) and moves past it. plain
// reports a number with neither fraction nor exponent.
func (s *scanner) scanNumber() (plain bool, err *Error) {
	data := s.data
	i := s.pos
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case i < len(data) && data[i] >= '1' && data[i] <= '9':
		for i < len(data) && isDigit(data[i]) {
			i++
		}
	default:
		s.pos = i
		return false, s.syntaxErr("invalid number")
	}
	plain = true
	if i < len(data) && data[i] == '.' {
		plain = false
		if i, err = s.requireDigits(i+1, "invalid number: digit expected after '.'"); err != nil {
			return false, err
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		plain = false
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if i, err = s.requireDigits(i, "invalid number: digit expected in exponent"); err != nil {
			return false, err
		}
	}
	s.pos = i
	return plain, nil
}

// requireDigits returns the index past the run of digits at i (of a
// fraction or an exponent), which must not be empty: if it is, it moves s
// to i and returns the syntax error msg.
func (s *scanner) requireDigits(i int, msg string) (int, *Error) {
	data := s.data
	if i >= len(data) || !isDigit(data[i]) {
		s.pos = i
		return i, s.syntaxErr(msg)
	}
	for i < len(data) && isDigit(data[i]) {
		i++
	}
	return i, nil
}

// scanLiteral moves past true, false or null.
func (s *scanner) scanLiteral() *Error {
	var lit string
	switch s.peek() {
	case 't':
		lit = "true"
	case 'f':
		lit = "false"
	case 'n':
		lit = "null"
	default:
		return s.syntaxErr("unexpected character")
	}
	if len(s.data)-s.pos < len(lit) || string(s.data[s.pos:s.pos+len(lit)]) != lit {
		return s.syntaxErr("invalid literal")
	}
	s.pos += len(lit)
	return nil
}

// Messages of the syntax errors after a container's element.
const (
	errAfterMember  = "expected ',' or '}' after an object member"
	errAfterElement = "expected ',' or ']' after an array element"
)

// openContainer moves past the '{' or '[' under s.pos after checking that
// a container is allowed at depth (depthField is blamed if not); empty
// reports that it closes at once with closer, which it then moves past too.
func (s *scanner) openContainer(closer byte, depth int, depthField string) (empty bool, err *Error) {
	if depth > MaxDepth {
		return false, depthErr(depthField)
	}
	s.pos++
	s.skipWS()
	if s.peek() == closer {
		s.pos++
		return true, nil
	}
	return false, nil
}

// memberName scans an object member's name and the ':' after it, leaving
// s.pos at the value.
func (s *scanner) memberName() (start, end int, escaped bool, err *Error) {
	if s.peek() != '"' {
		return 0, 0, false, s.syntaxErr("expected a member name")
	}
	if start, end, escaped, err = s.scanString(); err != nil {
		return 0, 0, false, err
	}
	s.skipWS()
	if s.peek() != ':' {
		return 0, 0, false, s.syntaxErr("expected ':' after a member name")
	}
	s.pos++
	s.skipWS()
	return start, end, escaped, nil
}

// afterElement moves past what must follow a container's member or
// element: a ',' (and the space after it), or the closer, reported as done.
// msg is the syntax error for anything else.
func (s *scanner) afterElement(closer byte, msg string) (done bool, err *Error) {
	s.skipWS()
	switch s.peek() {
	case ',':
		s.pos++
		s.skipWS()
		return false, nil
	case closer:
		s.pos++
		return true, nil
	}
	return false, s.syntaxErr(msg)
}

// skipValue validates the value under s.pos and moves past it, checking
// grammar and nesting only. depth is the nesting level a container here
// would have; depthField names the field blamed when it exceeds MaxDepth.
// Recursion is bounded by MaxDepth, so hostile input cannot exhaust the stack.
func (s *scanner) skipValue(depth int, depthField string) *Error {
	switch c := s.peek(); {
	case c == '{', c == '[':
		closer, msg := byte('}'), errAfterMember
		if c == '[' {
			closer, msg = ']', errAfterElement
		}
		if empty, err := s.openContainer(closer, depth, depthField); empty || err != nil {
			return err
		}
		for {
			if c == '{' {
				if _, _, _, err := s.memberName(); err != nil {
					return err
				}
			}
			if err := s.skipValue(depth+1, depthField); err != nil {
				return err
			}
			if done, err := s.afterElement(closer, msg); done || err != nil {
				return err
			}
		}
	case c == '"':
		_, _, _, err := s.scanString()
		return err
	case c == '-' || isDigit(c):
		_, err := s.scanNumber()
		return err
	default:
		return s.scanLiteral()
	}
}
