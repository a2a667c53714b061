// Package jsonmerge is the RFC 7386 JSON merge patch of the declarative
// merge rule (projection.Rules, projection.MergePatch), kept below the public
// packages so that the version guard (internal/engine/guard) can merge into a
// buffer of its own, without an allocation per event.
//
// Its error texts keep the "projection:" prefix they had when this code lived
// in package projection: they reach dead-letter records (the reason's
// message), which must not change with the move.
package jsonmerge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/projector-dev/projector/internal/core/jsonenc"
)

// ErrNotObject is returned when a merge payload is not a JSON object
// (projection.ErrPayloadNotObject).
var ErrNotObject = errors.New("projection: merge payload is not a JSON object")

// Patch is the merge patch the merge rule applies for an event's payload:
// the payload without surrounding whitespace, or nil with a nil error when
// there is nothing to merge (no payload, or null), or ErrNotObject.
func Patch(payload []byte) ([]byte, error) {
	p := bytes.TrimSpace(payload)
	if len(p) == 0 || string(p) == "null" {
		return nil, nil
	}
	if p[0] != '{' {
		return nil, ErrNotObject
	}
	return p, nil
}

// MergePatch applies an RFC 7386 JSON merge patch to a JSON object document
// and returns the result with object members in sorted order (so equal
// states are equal bytes). Values that are not objects (numbers, strings,
// arrays) are copied as raw bytes: numbers keep their exact spelling and
// precision, and arrays, which a merge patch replaces whole, are never
// decoded. Both inputs must be valid JSON (the payload was validated by the
// envelope decoder; the state was written here).
func MergePatch(doc, patch []byte) ([]byte, error) {
	return AppendMergePatch(make([]byte, 0, len(doc)+len(patch)), doc, patch)
}

// AppendMergePatch appends MergePatch(doc, patch) to dst (nil on error).
//
// It works on the input bytes directly, one object level at a time: the
// members of the target and of the patch object are listed as (key, raw
// value) spans in a small stack array, sorted when they are not already (the
// state written here always is), and merged in one pass into dst, recursing
// into objects. Nothing is allocated unless a key holds an escape sequence or
// an object has more members than the stack array holds.
//
// Listing the top level checks the whole input (doc before patch), so that
// the errors are the ones a parse of the whole document and then of the whole
// patch gives: objects strictly (every key a string, decoded when it has
// escapes), other values only as far as needed to find their end. The levels
// below are listed again, unchecked, as the merge reaches them.
func AppendMergePatch(dst, doc, patch []byte) ([]byte, error) {
	var stack [stackMembers]member
	ms := stack[:0]
	if len(doc) > 0 {
		var err error
		// A state that is not an object merges as {} (it lists no members).
		if ms, _, err = topMembers(ms, doc); err != nil {
			return nil, fmt.Errorf("projection: state: %w", err)
		}
	}
	nt := len(ms)
	ms, p, err := topMembers(ms, patch)
	if err != nil {
		return nil, fmt.Errorf("projection: payload: %w", err)
	}
	if p[0] != '{' {
		return append(dst, p...), nil // a patch that is not an object replaces
	}
	return appendMergeMembers(dst, ms[:nt], ms[nt:]), nil
}

// topMembers checks the JSON value b (surrounding whitespace allowed) and
// returns it without the whitespace; when it is an object, its members are
// appended to ms as members does.
func topMembers(ms []member, b []byte) ([]member, []byte, error) {
	i := skipWS(b, 0)
	if i >= len(b) {
		return ms, nil, errSyntax
	}
	var end int
	var err error
	if b[i] == '{' {
		base := len(ms)
		if ms, end, err = scanObject(b, i, ms, true, true); err != nil {
			return ms, nil, err
		}
		ms = ms[:base+sortMembers(ms[base:])]
	} else if end, err = skipValue(b, i); err != nil {
		return ms, nil, err
	}
	if skipWS(b, end) != len(b) {
		return ms, nil, errSyntax
	}
	return ms, b[i:end], nil
}

// member is one object member: its decoded key (the raw bytes between the
// quotes unless the key has escapes) and its raw value, without surrounding
// whitespace.
type member struct {
	key, val []byte
}

// stackMembers is how many members of the target and the patch object of
// one level together are listed without allocating.
const stackMembers = 16

// appendMerge appends RFC 7386 MergePatch(target, patch) for a target object
// and a patch object, both checked spans starting with '{' (nil: none, which
// merges as {} — and a nil patch re-encodes target normalised: sorted,
// duplicate keys resolved, keys re-encoded, whitespace between members
// dropped).
func appendMerge(dst, target, patch []byte) []byte {
	var stack [stackMembers]member
	ms := members(stack[:0], target)
	nt := len(ms)
	ms = members(ms, patch)
	return appendMergeMembers(dst, ms[:nt], ms[nt:])
}

// appendMergeMembers appends the merge of the patch members pm into the target
// members tm, both as members lists them.
func appendMergeMembers(dst []byte, tm, pm []member) []byte {
	dst = append(dst, '{')
	first := len(dst)
	for len(tm) > 0 || len(pm) > 0 {
		var c int
		switch {
		case len(pm) == 0:
			c = -1
		case len(tm) == 0:
			c = 1
		default:
			c = bytes.Compare(tm[0].key, pm[0].key)
		}
		if c < 0 {
			// A target member the patch leaves as it is.
			m := tm[0]
			tm = tm[1:]
			dst = appendMemberKey(dst, first, m.key)
			if m.val[0] == '{' {
				dst = appendMerge(dst, m.val, nil)
			} else {
				dst = append(dst, m.val...)
			}
			continue
		}
		key, pv := pm[0].key, pm[0].val
		pm = pm[1:]
		var tv []byte
		if c == 0 {
			tv = tm[0].val
			tm = tm[1:]
		}
		if string(pv) == "null" {
			continue // deletes the member (if there was one)
		}
		dst = appendMemberKey(dst, first, key)
		if pv[0] != '{' {
			dst = append(dst, pv...) // replaces
			continue
		}
		if len(tv) == 0 || tv[0] != '{' {
			tv = nil // an object merges into {} over anything else
		}
		dst = appendMerge(dst, tv, pv)
	}
	return append(dst, '}')
}

func appendMemberKey(dst []byte, first int, key []byte) []byte {
	if len(dst) > first {
		dst = append(dst, ',')
	}
	dst = jsonenc.AppendString(dst, key)
	return append(dst, ':')
}

// members appends the members of the checked object obj (none when obj is
// nil) to ms, sorted by key, of duplicate keys only the last (as in
// encoding/json). The top level checked obj whole (topMembers), keys
// included, so listing it again cannot fail.
func members(ms []member, obj []byte) []member {
	if len(obj) == 0 {
		return ms
	}
	base := len(ms)
	ms, _, _ = scanObject(obj, 0, ms, true, false)
	return ms[:base+sortMembers(ms[base:])]
}

// sortMembers sorts m stably by key unless it already is (strictly: without
// duplicates), keeps the last of duplicate keys and returns the new length.
func sortMembers(m []member) int {
	sorted := true
	for k := 1; k < len(m); k++ {
		if bytes.Compare(m[k-1].key, m[k].key) >= 0 {
			sorted = false
			break
		}
	}
	if sorted {
		return len(m)
	}
	if len(m) <= 12 {
		for i := 1; i < len(m); i++ {
			for j := i; j > 0 && bytes.Compare(m[j-1].key, m[j].key) > 0; j-- {
				m[j-1], m[j] = m[j], m[j-1]
			}
		}
	} else {
		slices.SortStableFunc(m, func(a, b member) int { return bytes.Compare(a.key, b.key) })
	}
	n := 0
	for _, x := range m {
		if n > 0 && bytes.Equal(m[n-1].key, x.key) {
			m[n-1] = x
			continue
		}
		m[n] = x
		n++
	}
	return n
}

var errSyntax = errors.New("invalid JSON")

// scanObject parses the object starting at b[i] ('{') and returns its end.
// With collect it appends the members to ms (keys decoded); with checkKeys
// it decodes keys with escapes only to check them, and object values are
// checked the same way, recursively. Other values, and object values when
// not checking, are only skipped.
func scanObject(b []byte, i int, ms []member, collect, checkKeys bool) ([]member, int, error) {
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return ms, i + 1, nil
	}
	var err error
	for {
		if i >= len(b) || b[i] != '"' {
			return ms, i, errSyntax
		}
		end, escaped := scanString(b, i)
		if end < 0 {
			return ms, i, errSyntax
		}
		key := b[i+1 : end-1]
		if escaped && (collect || checkKeys) {
			if key, err = unquote(b[i:end]); err != nil {
				return ms, i, err
			}
		}
		i = skipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return ms, i, errSyntax
		}
		start := skipWS(b, i+1)
		if start >= len(b) {
			return ms, start, errSyntax
		}
		if b[start] == '{' && checkKeys {
			_, i, err = scanObject(b, start, nil, false, true)
		} else {
			i, err = skipValue(b, start)
		}
		if err != nil {
			return ms, i, err
		}
		if collect {
			ms = append(ms, member{key: key, val: b[start:i]})
		}
		i = skipWS(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipWS(b, i+1)
			continue
		}
		if i < len(b) && b[i] == '}' {
			return ms, i + 1, nil
		}
		return ms, i, errSyntax
	}
}

// unquote decodes a JSON string token that has escapes (rare in keys, so
// encoding/json does it).
func unquote(tok []byte) ([]byte, error) {
	var s string
	if err := json.Unmarshal(tok, &s); err != nil {
		return nil, err
	}
	return []byte(s), nil
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the end of the string token at b[i] ('"'), -1 if it
// does not end, and whether it has escapes.
func scanString(b []byte, i int) (end int, escaped bool) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			escaped = true
			j++
		case '"':
			return j + 1, escaped
		}
	}
	return -1, escaped
}

// skipString is scanString as skipValue needs it.
func skipString(b []byte, i int) (int, error) {
	if end, _ := scanString(b, i); end >= 0 {
		return end, nil
	}
	return i, errSyntax
}

// skipValue returns the end of the value starting at i.
func skipValue(b []byte, i int) (int, error) {
	switch c := b[i]; {
	case c == '"':
		return skipString(b, i)
	case c == '{' || c == '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, err := skipString(b, j)
				if err != nil {
					return i, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return i, errSyntax
	default: // number, true, false, null
		// It ends at a delimiter, or at the start of a string or a
		// container, which no literal holds: the caller then finds no
		// delimiter and fails, as a parser would (the merge's listing of
		// the level below reads a quote as a string's start).
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' &&
			b[j] != '"' && b[j] != '{' && b[j] != '[' {
			j++
		}
		if j == i {
			return i, errSyntax
		}
		return j, nil
	}
}
