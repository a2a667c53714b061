package envelope

// The checks of a decoded field's content, and the quoting of offending
// values in the error messages.

import (
	"fmt"
	"strconv"
	"unicode/utf8"
)

// checkString validates a decoded string field's content; "" means valid.
func checkString(f field, v []byte) string {
	switch f {
	case fEventID, fAggregateID:
		if len(v) == 0 {
			return "must not be empty"
		}
		if len(v) > MaxIDBytes {
			return fmt.Sprintf("must be at most %d bytes, got %d", MaxIDBytes, len(v))
		}
	case fEventType:
		if len(v) == 0 {
			return "must not be empty"
		}
	case fOccurredAt:
		if !validRFC3339(v) {
			return fmt.Sprintf("must be an RFC 3339 timestamp, got %s", quoteTrunc(v))
		}
	}
	return ""
}

// parseVersion interprets a syntactically valid JSON number as an
// aggregateVersion. It works on the decimal digits rather than on a float so
// that "exact integer" is decided exactly: 3.0 and 3e0 are 3, but
// 9007199254740993 is not silently rounded and 1.5 is not truncated.
func parseVersion(lit []byte) (int64, string) {
	// Fast path: a plain positive integer short enough not to overflow.
	if len(lit) <= 18 && lit[0] != '-' {
		var v int64
		i := 0
		for ; i < len(lit) && isDigit(lit[i]); i++ {
			v = v*10 + int64(lit[i]-'0')
		}
		if i == len(lit) {
			if v < 1 {
				return 0, "must be >= 1, got " + string(lit)
			}
			return v, ""
		}
	}

	neg := lit[0] == '-'
	if neg {
		lit = lit[1:]
	}
	// Split into integer digits, fraction digits and exponent.
	i := 0
	for i < len(lit) && isDigit(lit[i]) {
		i++
	}
	intPart := lit[:i]
	var frac []byte
	if i < len(lit) && lit[i] == '.' {
		j := i + 1
		for j < len(lit) && isDigit(lit[j]) {
			j++
		}
		frac = lit[i+1 : j]
		i = j
	}
	exp := 0
	if i < len(lit) { // 'e' or 'E'
		i++
		expNeg := false
		if lit[i] == '+' || lit[i] == '-' {
			expNeg = lit[i] == '-'
			i++
		}
		for ; i < len(lit); i++ {
			if exp < 1e9 { // saturate: anything this large is out of range or not an integer anyway
				exp = exp*10 + int(lit[i]-'0')
			}
		}
		if expNeg {
			exp = -exp
		}
	}

	// value = digits × 10^exp10, with digits stripped of leading and trailing zeros.
	var dbuf [40]byte
	digits := append(append(dbuf[:0:len(dbuf)], intPart...), frac...)
	exp10 := exp - len(frac)
	for len(digits) > 0 && digits[0] == '0' {
		digits = digits[1:]
	}
	for len(digits) > 0 && digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
		exp10++
	}
	shown := quoteNumber(neg, lit)
	switch {
	case len(digits) == 0 || neg:
		return 0, "must be >= 1, got " + shown
	case exp10 < 0:
		return 0, "must be an integer, got " + shown
	case len(digits)+exp10 > 19:
		return 0, "out of range (max 9223372036854775807), got " + shown
	}
	var v uint64 // at most 19 digits: fits uint64
	for _, d := range digits {
		v = v*10 + uint64(d-'0')
	}
	for ; exp10 > 0; exp10-- {
		v *= 10
	}
	if v > 1<<63-1 {
		return 0, "out of range (max 9223372036854775807), got " + shown
	}
	return int64(v), ""
}

// quoteNumber renders a number literal for an error message, truncated: the
// message ends up in a Kafka header and in logs.
func quoteNumber(neg bool, lit []byte) string {
	const max = 40
	s := string(lit)
	if len(s) > max {
		s = s[:max] + "…"
	}
	if neg {
		return "-" + s
	}
	return s
}

// quoteTrunc quotes a decoded string for an error message, truncated. It
// copies v to a string first: passing the slice itself to fmt would make
// every caller's buffer escape to the heap, including decode's stack buffer.
func quoteTrunc(v []byte) string {
	const max = 64
	if len(v) > max {
		// back up to a rune boundary so the truncated text stays valid UTF-8
		n := max
		for n > 0 && !utf8.RuneStart(v[n]) {
			n--
		}
		return strconv.Quote(string(v[:n])) + "…"
	}
	return strconv.Quote(string(v))
}

// kindName names the JSON type of a value from its first byte.
func kindName(c byte) string {
	switch {
	case c == '{':
		return "object"
	case c == '[':
		return "array"
	case c == '"':
		return "string"
	case c == 't' || c == 'f':
		return "boolean"
	case c == 'n':
		return "null"
	default:
		return "number"
	}
}
