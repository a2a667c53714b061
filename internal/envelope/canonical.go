package envelope

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"
)

// Fingerprint is SHA-256 of the RFC 8785 canonical JSON of the object
// {eventType, aggregateType, aggregateId, aggregateVersion, tenantId, payload};
// members that are absent (""/0/nil) are omitted; a null payload is included
// as null. See AppendCanonical.
func (e *Event) Fingerprint() [32]byte {
	c := getCanonicalizer()
	c.buf = e.appendCanonical(c, c.buf[:0])
	sum := sha256.Sum256(c.buf)
	putCanonicalizer(c)
	return sum
}

// AppendCanonical appends the canonical JSON that Fingerprint hashes. An
// empty Payload counts as absent.
//
// The payload is expected to be one that Decode accepted. For a hand-built
// Event whose Payload Decode would reject, AppendCanonical neither fails nor
// panics, and its output is deterministic but not canonical: a payload that
// does not parse as I-JSON is appended verbatim.
func (e *Event) AppendCanonical(dst []byte) []byte {
	c := getCanonicalizer()
	dst = e.appendCanonical(c, dst)
	putCanonicalizer(c)
	return dst
}

func (e *Event) appendCanonical(c *canonicalizer, dst []byte) []byte {
	// Member names are ASCII, so their UTF-16 order is their byte order:
	// aggregateId < aggregateType < aggregateVersion < eventType < payload < tenantId.
	dst = append(dst, '{')
	n := 0
	if e.AggregateID != "" {
		dst = appendName(dst, &n, `"aggregateId":`)
		dst = appendCanonicalString(dst, e.AggregateID)
	}
	if e.AggregateType != "" {
		dst = appendName(dst, &n, `"aggregateType":`)
		dst = appendCanonicalString(dst, e.AggregateType)
	}
	if e.AggregateVersion != 0 {
		dst = appendName(dst, &n, `"aggregateVersion":`)
		dst = strconv.AppendInt(dst, e.AggregateVersion, 10)
	}
	if e.EventType != "" {
		dst = appendName(dst, &n, `"eventType":`)
		dst = appendCanonicalString(dst, e.EventType)
	}
	if len(e.Payload) != 0 {
		dst = appendName(dst, &n, `"payload":`)
		mark := len(dst)
		c.reset(e.Payload, true)
		c.skipWS()
		var err *Error
		dst, err = c.value(dst, 2)
		if err == nil {
			err = c.expectEnd()
		}
		if err != nil || c.semErr != nil {
			dst = append(dst[:mark], e.Payload...)
		}
	}
	if e.TenantID != "" {
		dst = appendName(dst, &n, `"tenantId":`)
		dst = appendCanonicalString(dst, e.TenantID)
	}
	return append(dst, '}')
}

func appendName(dst []byte, n *int, name string) []byte {
	if *n > 0 {
		dst = append(dst, ',')
	}
	*n++
	return append(dst, name...)
}

// validatePayload validates the payload value under s.pos (the walk that
// Fingerprint will later repeat, without producing output) and moves s past
// it. err is structural and ends decoding; sem is the first I-JSON problem
// (duplicate name, unpaired surrogate, overflowing number), a field-level
// error that lets the scan go on.
func validatePayload(s *scanner) (sem, err *Error) {
	c := getCanonicalizer()
	c.reset(s.data, false)
	c.pos = s.pos
	_, err = c.value(nil, 2)
	s.pos = c.pos
	sem = c.semErr
	putCanonicalizer(c)
	return sem, err
}

// canonicalizer walks one JSON value, validating it as I-JSON and, when
// emit is set, appending its RFC 8785 form to the out slice threaded through
// its methods (kept out of the struct so that the hot appends work on a
// register-held slice rather than writing a heap field back each time).
//
// Objects are handled in one pass: each member is emitted as `"name":value`
// in input order while its sort key is recorded; if the names were not
// already in order, the members are then re-laid from a scratch copy. Each
// nesting level may copy its subtree once, so the work is O(size × depth),
// which MaxDepth bounds at 64× the (size-limited) input.
type canonicalizer struct {
	scanner
	emit    bool
	semErr  *Error
	members []member // stack of the open objects' members
	names   []byte   // decoded names of members whose names contained escapes
	tmp     []byte   // scratch for re-laying an object's members
	buf     []byte   // Fingerprint's output buffer, kept for reuse
}

// member is one object member awaiting sorting. It holds offsets rather
// than slices so that it contains no pointers: sorting then moves plain
// words, with no GC write barriers.
type member struct {
	nameStart, nameEnd int  // decoded name (the sort key): in data, or in names if escaped
	escaped            bool // name is in names
	start, end         int  // `"name":value` in out (emit mode)
}

func (c *canonicalizer) name(m *member) []byte {
	if m.escaped {
		return c.names[m.nameStart:m.nameEnd]
	}
	return c.data[m.nameStart:m.nameEnd]
}

var canonicalizerPool = sync.Pool{New: func() any { return new(canonicalizer) }}

func getCanonicalizer() *canonicalizer { return canonicalizerPool.Get().(*canonicalizer) }

// putCanonicalizer returns c to the pool, dropping buffers that a rare huge
// payload grew, so the pool does not pin them.
func putCanonicalizer(c *canonicalizer) {
	const keep = 64 << 10
	c.data = nil
	c.semErr = nil
	if cap(c.buf) > keep {
		c.buf = nil
	}
	if cap(c.tmp) > keep {
		c.tmp = nil
	}
	if cap(c.names) > keep {
		c.names = nil
	}
	if cap(c.members) > keep/32 {
		c.members = nil
	}
	canonicalizerPool.Put(c)
}

func (c *canonicalizer) reset(data []byte, emit bool) {
	c.data, c.pos, c.emit, c.semErr = data, 0, emit, nil
	c.members, c.names = c.members[:0], c.names[:0]
}

// fail records an I-JSON violation. In validate mode the walk goes on so
// that the decoder can still report a later syntax error in preference.
func (c *canonicalizer) fail(format string, args ...any) {
	if c.semErr == nil {
		c.semErr = &Error{"payload", fmt.Sprintf(format, args...)}
	}
}

// value handles the value under c.pos; depth is the nesting level a
// container here has. Only structural errors are returned.
func (c *canonicalizer) value(out []byte, depth int) ([]byte, *Error) {
	switch ch := c.peek(); {
	case ch == '{':
		return c.object(out, depth)
	case ch == '[':
		return c.array(out, depth)
	case ch == '"':
		start, end, escaped, err := c.scanString()
		if err != nil {
			return out, err
		}
		ok := true
		switch {
		case !escaped:
			if c.emit {
				out = append(out, c.data[start-1:end+1]...)
			}
		case c.emit:
			out, ok = appendCanonicalEscaped(out, c.data[start:end])
		default:
			ok = pairedSurrogates(c.data[start:end])
		}
		if !ok {
			c.fail("string at offset %d contains an unpaired UTF-16 surrogate escape", start-1)
		}
		return out, nil
	case ch == '-' || isDigit(ch):
		start := c.pos
		plain, err := c.scanNumber()
		if err != nil {
			return out, err
		}
		return c.number(out, c.data[start:c.pos], plain, start), nil
	default:
		start := c.pos
		if err := c.scanLiteral(); err != nil {
			return out, err
		}
		if c.emit {
			out = append(out, c.data[start:c.pos]...)
		}
		return out, nil
	}
}

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

func (c *canonicalizer) array(out []byte, depth int) ([]byte, *Error) {
	if depth > MaxDepth {
		return out, depthErr("payload")
	}
	c.pos++
	if c.emit {
		out = append(out, '[')
	}
	c.skipWS()
	if c.peek() == ']' {
		c.pos++
		if c.emit {
			out = append(out, ']')
		}
		return out, nil
	}
	for {
		var err *Error
		if out, err = c.value(out, depth+1); err != nil {
			return out, err
		}
		c.skipWS()
		switch c.peek() {
		case ',':
			c.pos++
			c.skipWS()
			if c.emit {
				out = append(out, ',')
			}
		case ']':
			c.pos++
			if c.emit {
				out = append(out, ']')
			}
			return out, nil
		default:
			return out, c.syntaxErr("expected ',' or ']' after an array element")
		}
	}
}

func (c *canonicalizer) object(out []byte, depth int) ([]byte, *Error) {
	if depth > MaxDepth {
		return out, depthErr("payload")
	}
	c.pos++
	base, namesBase, objStart := len(c.members), len(c.names), len(out)
	if c.emit {
		out = append(out, '{')
	}
	c.skipWS()
	if c.peek() == '}' {
		c.pos++
		if c.emit {
			out = append(out, '}')
		}
		return out, nil
	}
	sorted := true
	var prev []byte // previous member's name
	for {
		if c.peek() != '"' {
			return out, c.syntaxErr("expected a member name")
		}
		start, end, escaped, err := c.scanString()
		if err != nil {
			return out, err
		}
		m := member{nameStart: start, nameEnd: end, escaped: escaped}
		name := c.data[start:end]
		if escaped {
			m.nameStart = len(c.names)
			var ok bool
			if c.names, ok = appendUnescaped(c.names, name); !ok {
				c.fail("member name at offset %d contains an unpaired UTF-16 surrogate escape", start-1)
			}
			m.nameEnd = len(c.names)
			// Later appends may move c.names; this slice keeps pointing at
			// the old array, whose bytes for this name do not change.
			name = c.names[m.nameStart:m.nameEnd]
		}
		c.skipWS()
		if c.peek() != ':' {
			return out, c.syntaxErr("expected ':' after a member name")
		}
		c.pos++
		c.skipWS()

		mStart := len(out)
		if c.emit {
			if len(c.members) > base {
				out = append(out, ',')
				mStart++
			}
			if escaped {
				out = appendCanonicalString(out, name)
			} else {
				out = append(out, c.data[start-1:end+1]...)
			}
			out = append(out, ':')
		}
		if out, err = c.value(out, depth+1); err != nil {
			return out, err
		}
		// Equal names also clear sorted, so the duplicate check below runs.
		if len(c.members) > base && compareUTF16(prev, name) >= 0 {
			sorted = false
		}
		prev = name
		m.start, m.end = mStart, len(out)
		c.members = append(c.members, m)

		c.skipWS()
		if ch := c.peek(); ch == ',' {
			c.pos++
			c.skipWS()
			continue
		} else if ch == '}' {
			c.pos++
			break
		}
		return out, c.syntaxErr("expected ',' or '}' after an object member")
	}

	if ms := c.members[base:]; !sorted && !c.emit && len(ms) <= 8 {
		// Validation only needs the duplicate check, and for the small
		// objects typical of payloads comparing all pairs beats sorting.
		for i := 1; i < len(ms); i++ {
			name := c.name(&ms[i])
			for j := 0; j < i; j++ {
				if bytes.Equal(c.name(&ms[j]), name) {
					c.fail("duplicate member name %s in an object", quoteTrunc(name))
				}
			}
		}
	} else if !sorted {
		c.sortMembers(ms)
		for i := 1; i < len(ms); i++ {
			if name := c.name(&ms[i]); bytes.Equal(c.name(&ms[i-1]), name) {
				c.fail("duplicate member name %s in an object", quoteTrunc(name))
				break
			}
		}
		if c.emit {
			// Re-lay the members in sorted order from a copy.
			body := objStart + 1
			c.tmp = append(c.tmp[:0], out[body:]...)
			out = out[:body]
			for i, m := range ms {
				if i > 0 {
					out = append(out, ',')
				}
				out = append(out, c.tmp[m.start-body:m.end-body]...)
			}
		}
	}
	if c.emit {
		out = append(out, '}')
	}
	c.members, c.names = c.members[:base], c.names[:namesBase]
	return out, nil
}

// sortMembers sorts an object's members by name. Small objects, the common
// case, use an insertion sort over names cached in a stack array, which
// avoids re-deriving each name per comparison and the generic sort's
// indirect calls.
func (c *canonicalizer) sortMembers(ms []member) {
	const small = 16
	if len(ms) > small {
		slices.SortFunc(ms, func(a, b member) int { return compareUTF16(c.name(&a), c.name(&b)) })
		return
	}
	var names [small][]byte
	for i := range ms {
		names[i] = c.name(&ms[i])
	}
	for i := 1; i < len(ms); i++ {
		for j := i; j > 0 && compareUTF16(names[j-1], names[j]) > 0; j-- {
			names[j-1], names[j] = names[j], names[j-1]
			ms[j-1], ms[j] = ms[j], ms[j-1]
		}
	}
}

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

func appendCanonicalRune(dst []byte, r rune) []byte {
	switch r {
	case '"':
		return append(dst, '\\', '"')
	case '\\':
		return append(dst, '\\', '\\')
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	if r < 0x20 {
		const hex = "0123456789abcdef"
		return append(dst, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xF])
	}
	return utf8.AppendRune(dst, r)
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
