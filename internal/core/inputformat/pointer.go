package inputformat

import (
	"errors"
	"strconv"
	"strings"
)

// pointer is a parsed RFC 6901 JSON Pointer.
type pointer struct {
	text   string   // as configured, for messages
	tokens []string // reference tokens, ~1 and ~0 decoded
}

// parsePointer parses an RFC 6901 pointer: "" (the whole document) or
// "/"-separated reference tokens in which "~1" stands for "/" and "~0" for
// "~".
func parsePointer(s string) (pointer, error) {
	p := pointer{text: s}
	if s == "" {
		return p, nil
	}
	if s[0] != '/' {
		return p, errors.New("a JSON pointer must be empty or start with '/'")
	}
	for _, tok := range strings.Split(s[1:], "/") {
		for i := 0; i < len(tok); i++ {
			if tok[i] == '~' && (i+1 == len(tok) || (tok[i+1] != '0' && tok[i+1] != '1')) {
				return p, errors.New("'~' must be followed by 0 or 1 in a JSON pointer")
			}
		}
		// RFC 6901 §4: ~1 first, then ~0, so that "~01" becomes "~1".
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		p.tokens = append(p.tokens, tok)
	}
	return p, nil
}

// span locates one JSON value in a document: d[start:end].
type span struct {
	start, end int
	kind       kind
}

// rootSpan is the top-level value of a checked document.
func rootSpan(d []byte) span {
	i := skipWS(d, 0)
	return span{i, skipValue(d, i), kindOf(d[i])}
}

// lookup resolves tokens from at in the checked document d. A path that
// leads nowhere gives kindNone. A member name that occurs twice in an
// object on the path is an error (msg), since which of the two is meant
// would depend on the parser: RFC 8259 leaves it open, I-JSON forbids it.
func lookup(d []byte, at span, tokens []string) (_ span, msg string) {
	for _, tok := range tokens {
		switch at.kind {
		case kindObject:
			var dup bool
			if at, dup = objectMember(d, at, tok); dup {
				return span{}, "member " + strconv.Quote(tok) + " occurs twice"
			}
		case kindArray:
			at = element(d, at, tok)
		default:
			return span{}, ""
		}
		if at.kind == kindNone {
			return at, ""
		}
	}
	return at, ""
}

// objectMember finds the member named name in the object at obj.
func objectMember(d []byte, obj span, name string) (found span, dup bool) {
	i := skipWS(d, obj.start+1)
	if d[i] == '}' {
		return found, false
	}
	for {
		nEnd, esc := skipString(d, i)
		match := nameIs(d[i:nEnd], esc, name)
		i = skipWS(d, skipWS(d, nEnd)+1) // past ':'
		vEnd := skipValue(d, i)
		if match {
			if found.kind != kindNone {
				return span{}, true
			}
			found = span{i, vEnd, kindOf(d[i])}
		}
		i = skipWS(d, vEnd)
		if d[i] == '}' {
			return found, false
		}
		i = skipWS(d, i+1)
	}
}

// nameIs reports whether the member name token raw (quotes included) is
// name, comparing the unescaped name when it has escapes.
func nameIs(raw []byte, escaped bool, name string) bool {
	if !escaped {
		return string(raw[1:len(raw)-1]) == name
	}
	var buf [64]byte
	u, ok := unescape(buf[:0], raw)
	return ok && string(u) == name
}

// maxIndexed is how many members of a document's top-level object
// topIndex holds; the members of a larger object are searched one by one.
const maxIndexed = 48

// topIndex locates the members of a document's top-level object in one
// pass. A decoder looks a dozen members up per record (the attributes of a
// structured CloudEvent, the pointers of a mapping); scanning the object
// again for each, skipping the data every time, cost a structured
// CloudEvent three times a binary one.
type topIndex struct {
	built, overflow bool
	n               int
	m               [maxIndexed]indexedMember
}

type indexedMember struct {
	name    span // the name token, quotes included
	escaped bool
	at      span
}

func (x *topIndex) build(d []byte, obj span) {
	x.built = true
	i := skipWS(d, obj.start+1)
	if d[i] == '}' {
		return
	}
	for {
		if x.n == maxIndexed {
			x.overflow = true
			return
		}
		nEnd, esc := skipString(d, i)
		e := &x.m[x.n]
		x.n++
		e.name, e.escaped = span{start: i, end: nEnd}, esc
		i = skipWS(d, skipWS(d, nEnd)+1)
		vEnd := skipValue(d, i)
		e.at = span{i, vEnd, kindOf(d[i])}
		i = skipWS(d, vEnd)
		if d[i] == '}' {
			return
		}
		i = skipWS(d, i+1)
	}
}

// find is objectMember of the indexed object.
func (x *topIndex) find(d []byte, name string) (found span, dup bool) {
	for k := 0; k < x.n; k++ {
		e := &x.m[k]
		if nameIs(d[e.name.start:e.name.end], e.escaped, name) {
			if found.kind != kindNone {
				return span{}, true
			}
			found = e.at
		}
	}
	return found, false
}

// element finds the array element with index tok (RFC 6901: decimal, no
// leading zeros; "-" names no element when reading).
func element(d []byte, arr span, tok string) span {
	if tok == "" || (len(tok) > 1 && tok[0] == '0') {
		return span{}
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] < '0' || tok[i] > '9' {
			return span{}
		}
	}
	n, err := strconv.Atoi(tok)
	if err != nil {
		return span{}
	}
	i := skipWS(d, arr.start+1)
	if d[i] == ']' {
		return span{}
	}
	for k := 0; ; k++ {
		end := skipValue(d, i)
		if k == n {
			return span{i, end, kindOf(d[i])}
		}
		i = skipWS(d, end)
		if d[i] == ']' {
			return span{}
		}
		i = skipWS(d, i+1)
	}
}
