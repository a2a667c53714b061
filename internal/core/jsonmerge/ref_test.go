// Code copied from the previous MergePatch (before the allocation-free
// rewrite), kept as the reference implementation the differential tests and
// the fuzz test compare against.

package jsonmerge

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/projector-dev/projector/internal/core/jsonenc"
)

// refMergePatch applies an RFC 7386 JSON merge patch to a JSON object document
// and returns the result with object members in sorted order (so equal
// states are equal bytes). Values that are not objects (numbers, strings,
// arrays) are copied as raw bytes: numbers keep their exact spelling and
// precision, and arrays, which a merge patch replaces whole, are never
// decoded. Both inputs must be valid JSON (the payload was validated by the
// envelope decoder; the state was written here).
func refMergePatch(doc, patch []byte) ([]byte, error) {
	var target *refObject
	if len(doc) > 0 {
		v, err := refParseValue(doc)
		if err != nil {
			return nil, fmt.Errorf("projection: state: %w", err)
		}
		target = v.obj
	}
	p, err := refParseValue(patch)
	if err != nil {
		return nil, fmt.Errorf("projection: payload: %w", err)
	}
	out := refMergeValue(refValue{obj: target}, p)
	return out.append(make([]byte, 0, len(doc)+len(patch))), nil
}

// refValue is a JSON value: an object, or any other value as raw bytes.
type refValue struct {
	obj *refObject
	raw []byte // when obj == nil
}

type refMember struct {
	key string
	val refValue
}

// refObject keeps members sorted by key.
type refObject struct{ members []refMember }

func (o *refObject) find(k string) int {
	return sort.Search(len(o.members), func(i int) bool { return o.members[i].key >= k })
}

func refIsNull(v refValue) bool { return v.obj == nil && string(v.raw) == "null" }

// refMergeValue is RFC 7386 MergePatch(Target, Patch).
func refMergeValue(target, patch refValue) refValue {
	if patch.obj == nil {
		return patch
	}
	t := target.obj
	if t == nil {
		t = &refObject{}
	} else {
		// Copy: targets may alias a parsed document we must not mutate
		// through shared slices.
		t = &refObject{members: append([]refMember(nil), t.members...)}
	}
	for _, m := range patch.obj.members {
		i := t.find(m.key)
		found := i < len(t.members) && t.members[i].key == m.key
		switch {
		case refIsNull(m.val):
			if found {
				t.members = append(t.members[:i], t.members[i+1:]...)
			}
		case found:
			t.members[i].val = refMergeValue(t.members[i].val, m.val)
		default:
			t.members = append(t.members, refMember{})
			copy(t.members[i+1:], t.members[i:])
			t.members[i] = refMember{key: m.key, val: refMergeValue(refValue{}, m.val)}
		}
	}
	return refValue{obj: t}
}

func (v refValue) append(b []byte) []byte {
	if v.obj == nil {
		return append(b, v.raw...)
	}
	b = append(b, '{')
	for i, m := range v.obj.members {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonenc.AppendString(b, m.key)
		b = append(b, ':')
		b = m.val.append(b)
	}
	return append(b, '}')
}

var errRefSyntax = errors.New("invalid JSON")

// refParseValue parses one JSON value (surrounding whitespace allowed).
func refParseValue(b []byte) (refValue, error) {
	i := refSkipWS(b, 0)
	v, i, err := refParseAt(b, i)
	if err != nil {
		return refValue{}, err
	}
	if refSkipWS(b, i) != len(b) {
		return refValue{}, errRefSyntax
	}
	return v, nil
}

func refParseAt(b []byte, i int) (refValue, int, error) {
	if i >= len(b) {
		return refValue{}, i, errRefSyntax
	}
	if b[i] != '{' {
		end, err := refSkipValue(b, i)
		if err != nil {
			return refValue{}, i, err
		}
		return refValue{raw: b[i:end]}, end, nil
	}
	o := &refObject{}
	i = refSkipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return refValue{obj: o}, i + 1, nil
	}
	sorted := true
	for {
		if i >= len(b) || b[i] != '"' {
			return refValue{}, i, errRefSyntax
		}
		end, err := refSkipString(b, i)
		if err != nil {
			return refValue{}, i, err
		}
		key, err := refUnquote(b[i:end])
		if err != nil {
			return refValue{}, i, err
		}
		i = refSkipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return refValue{}, i, errRefSyntax
		}
		var v refValue
		v, i, err = refParseAt(b, refSkipWS(b, i+1))
		if err != nil {
			return refValue{}, i, err
		}
		if n := len(o.members); n > 0 && o.members[n-1].key >= key {
			sorted = false
		}
		o.members = append(o.members, refMember{key: key, val: v})
		i = refSkipWS(b, i)
		if i < len(b) && b[i] == ',' {
			i = refSkipWS(b, i+1)
			continue
		}
		if i < len(b) && b[i] == '}' {
			i++
			break
		}
		return refValue{}, i, errRefSyntax
	}
	if !sorted {
		// Stable, so that of duplicate keys (rejected upstream for
		// payloads) the last one wins, as in encoding/json.
		sort.SliceStable(o.members, func(a, c int) bool { return o.members[a].key < o.members[c].key })
		dedup := o.members[:0]
		for _, m := range o.members {
			if n := len(dedup); n > 0 && dedup[n-1].key == m.key {
				dedup[n-1] = m
				continue
			}
			dedup = append(dedup, m)
		}
		o.members = dedup
	}
	return refValue{obj: o}, i, nil
}

// refUnquote decodes a JSON string token; the common case has no escapes.
func refUnquote(tok []byte) (string, error) {
	inner := tok[1 : len(tok)-1]
	for _, c := range inner {
		if c == '\\' {
			var s string
			if err := json.Unmarshal(tok, &s); err != nil {
				return "", err
			}
			return s, nil
		}
	}
	return string(inner), nil
}

func refSkipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func refSkipString(b []byte, i int) (int, error) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return i, errRefSyntax
}

// refSkipValue returns the end of the refValue starting at i.
func refSkipValue(b []byte, i int) (int, error) {
	switch c := b[i]; {
	case c == '"':
		return refSkipString(b, i)
	case c == '{' || c == '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				end, err := refSkipString(b, j)
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
		return i, errRefSyntax
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
			return i, errRefSyntax
		}
		return j, nil
	}
}
