package envelope

// Numbers for the canonical form: RFC 8785 §3.2.2.3 prints them as
// ECMAScript does.

import (
	"bytes"
	"math"
	"strconv"
)

// number canonicalises a syntactically valid number literal.
func (c *canonicalizer) number(out, lit []byte, plain bool, offset int) []byte {
	// Fast path: an integer of at most 15 digits is exactly representable
	// and ECMAScript prints it as written; only "-0" changes (to "0").
	if plain && len(lit) <= 15 {
		if c.emit {
			if len(lit) == 2 && lit[0] == '-' && lit[1] == '0' {
				lit = lit[1:]
			}
			out = append(out, lit...)
		}
		return out
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil && math.IsInf(f, 0) {
		c.fail("number at offset %d overflows an IEEE-754 double", offset)
		return out
	}
	// Underflow is not an error: like ECMAScript, tiny numbers round to 0.
	if c.emit {
		out = appendNumber(out, f)
	}
	return out
}

// appendNumber appends f as ECMAScript's Number.prototype.toString does
// (ECMA-262 Number::toString, as required by RFC 8785 §3.2.2.3). f must be
// finite. strconv's shortest round-trip digits are the digits ECMAScript
// requires; only the layout differs.
func appendNumber(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0') // also -0
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	var buf [32]byte
	b := strconv.AppendFloat(buf[:0], f, 'e', -1, 64) // d[.ddd]e±xx
	e := bytes.IndexByte(b, 'e')
	var dbuf [24]byte
	digits := append(dbuf[:0], b[0])
	if e > 1 {
		digits = append(digits, b[2:e]...)
	}
	exp, _ := strconv.Atoi(string(b[e+1:]))
	k, n := len(digits), exp+1 // value = 0.digits × 10^n

	switch {
	case k <= n && n <= 21: // integer: digits then zeros
		dst = append(dst, digits...)
		for ; k < n; k++ {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21: // decimal point inside the digits
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0: // 0.000ddd
		dst = append(dst, '0', '.')
		for i := n; i < 0; i++ {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default: // exponent form: d[.ddd]e±x
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}
