package envelope

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"slices"
	"strconv"
	"sync"
)

// Fingerprint is SHA-256 of the RFC 8785 canonical JSON of the object
// {eventType, aggregateType, aggregateId, aggregateVersion, tenantId, payload};
// members that are absent (""/0/nil) are omitted; a null payload is included
// as null. See AppendCanonical.
func (e *Event) Fingerprint() [32]byte {
	c := getCanonicalizer()
	c.buf = e.appendCanonical(c, c.buf[:0], nil)
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
	dst = e.appendCanonical(c, dst, nil)
	putCanonicalizer(c)
	return dst
}

// appendCanonical is AppendCanonical with c's scratch. payload, when not
// empty, is the payload's canonical form already (DecodeFingerprint's walk
// wrote it): appended as it is.
func (e *Event) appendCanonical(c *canonicalizer, dst, payload []byte) []byte {
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
	switch {
	case len(e.Payload) == 0:
	case len(payload) != 0:
		dst = appendName(dst, &n, `"payload":`)
		dst = append(dst, payload...)
	default:
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

// validatePayload validates the payload value under s.pos and moves s past
// it. err is structural and ends decoding; sem is the first I-JSON problem
// (duplicate name, unpaired surrogate, overflowing number), a field-level
// error that lets the scan go on. With c set (DecodeFingerprint's), c walks
// it and writes its canonical form into c.payload, the walk Fingerprint
// would otherwise repeat; without, a pooled canonicalizer walks it and
// writes nothing.
func validatePayload(s *scanner, c *canonicalizer) (sem, err *Error) {
	emit := c != nil
	if !emit {
		c = getCanonicalizer()
		defer putCanonicalizer(c)
	}
	c.reset(s.data, emit)
	c.pos = s.pos
	if emit {
		c.payload, err = c.value(c.payload[:0], 2)
	} else {
		_, err = c.value(nil, 2)
	}
	s.pos = c.pos
	return c.semErr, err
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
	payload []byte   // DecodeFingerprint's canonical payload, kept for reuse
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
	if cap(c.payload) > keep {
		c.payload = nil
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

// open starts the container under c.pos: the depth check, its opening byte
// and, when it is empty (reported), its closer too.
func (c *canonicalizer) open(out []byte, closer byte, depth int) (_ []byte, empty bool, err *Error) {
	opener := c.data[c.pos]
	if empty, err = c.openContainer(closer, depth, "payload"); err != nil || !c.emit {
		return out, empty, err
	}
	out = append(out, opener)
	if empty {
		out = append(out, closer)
	}
	return out, empty, nil
}

func (c *canonicalizer) array(out []byte, depth int) ([]byte, *Error) {
	out, empty, err := c.open(out, ']', depth)
	if err != nil || empty {
		return out, err
	}
	for {
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

// object emits the members in input order, recording each one's sort key
// and place in out; sortObject then checks for duplicate names and, if the
// names were out of order, re-lays the members sorted. Like decode's, the
// member loop scans names and separators inline: it is the hot path (see
// decode for the figures).
func (c *canonicalizer) object(out []byte, depth int) ([]byte, *Error) {
	base, namesBase, objStart := len(c.members), len(c.names), len(out)
	out, empty, err := c.open(out, '}', depth)
	if err != nil || empty {
		return out, err
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

	if !sorted {
		out = c.sortObject(out, c.members[base:], objStart)
	}
	if c.emit {
		out = append(out, '}')
	}
	c.members, c.names = c.members[:base], c.names[:namesBase]
	return out, nil
}

// sortObject handles an object whose member names were not in strictly
// increasing order (ms, emitted at out[objStart:] in input order): it
// reports a duplicate name and, when emitting, re-lays the members sorted.
// Of several duplicate names it reports the one that sorts first, whichever
// way it finds them, so that validating and emitting (DecodeInto and
// DecodeFingerprint) give the same error.
func (c *canonicalizer) sortObject(out []byte, ms []member, objStart int) []byte {
	if !c.emit && len(ms) <= 8 {
		// Validation only needs the duplicate check, and for the small
		// objects typical of payloads comparing all pairs beats sorting.
		var dup []byte
		found := false
		for i := 1; i < len(ms); i++ {
			name := c.name(&ms[i])
			for j := 0; j < i; j++ {
				if bytes.Equal(c.name(&ms[j]), name) && (!found || compareUTF16(name, dup) < 0) {
					dup, found = name, true
				}
			}
		}
		if found {
			c.fail("duplicate member name %s in an object", quoteTrunc(dup))
		}
		return out
	}
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
	return out
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
