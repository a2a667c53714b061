package projection

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/projector-dev/projector/internal/jsonenc"
)

// MergePatch applies an RFC 7386 JSON merge patch to a JSON object document
// and returns the result with object members in sorted order (so equal
// states are equal bytes). Values that are not objects (numbers, strings,
// arrays) are copied as raw bytes: numbers keep their exact spelling and
// precision, and arrays, which a merge patch replaces whole, are never
// decoded. Both inputs must be valid JSON (the payload was validated by the
// envelope decoder; the state was written here).
func MergePatch(doc, patch []byte) ([]byte, error) {
	var target *object
	if len(doc) > 0 {
		v, err := parseValue(doc)
		if err != nil {
			return nil, fmt.Errorf("projection: state: %w", err)
		}
		target = v.obj
	}
	p, err := parseValue(patch)
	if err != nil {
		return nil, fmt.Errorf("projection: payload: %w", err)
	}
	out := mergeValue(value{obj: target}, p)
	return out.append(make([]byte, 0, len(doc)+len(patch))), nil
}

// value is a JSON value: an object, or any other value as raw bytes.
type value struct {
	obj *object
	raw []byte // when obj == nil
}

type member struct {
	key string
	val value
}

// object keeps members sorted by key.
type object struct{ members []member }

func (o *object) find(k string) int {
	return sort.Search(len(o.members), func(i int) bool { return o.members[i].key >= k })
}

func isNull(v value) bool { return v.obj == nil && string(v.raw) == "null" }

// mergeValue is RFC 7386 MergePatch(Target, Patch).
func mergeValue(target, patch value) value {
	if patch.obj == nil {
		return patch
	}
	t := target.obj
	if t == nil {
		t = &object{}
	} else {
		// Copy: targets may alias a parsed document we must not mutate
		// through shared slices.
		t = &object{members: append([]member(nil), t.members...)}
	}
	for _, m := range patch.obj.members {
		i := t.find(m.key)
		found := i < len(t.members) && t.members[i].key == m.key
		switch {
		case isNull(m.val):
			if found {
				t.members = append(t.members[:i], t.members[i+1:]...)
			}
		case found:
			t.members[i].val = mergeValue(t.members[i].val, m.val)
		default:
			t.members = append(t.members, member{})
			copy(t.members[i+1:], t.members[i:])
			t.members[i] = member{key: m.key, val: mergeValue(value{}, m.val)}
		}
	}
	return value{obj: t}
}

func (v value) append(b []byte) []byte {
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

var errSyntax = errors.New("invalid JSON")

// parseValue parses one JSON value (surrounding whitespace allowed).
func parseValue(b []byte) (value, error) {
	i := skipWS(b, 0)
	v, i, err := parseAt(b, i)
	if err != nil {
		return value{}, err
	}
	if skipWS(b, i) != len(b) {
		return value{}, errSyntax
	}
	return v, nil
}

func parseAt(b []byte, i int) (value, int, error) {
	if i >= len(b) {
		return value{}, i, errSyntax
	}
	if b[i] != '{' {
		end, err := skipValue(b, i)
		if err != nil {
			return value{}, i, err
		}
		return value{raw: b[i:end]}, end, nil
	}
	o := &object{}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return value{obj: o}, i + 1, nil
	}
	sorted := true
	for {
		if i >= len(b) || b[i] != '"' {
			return value{}, i, errSyntax
		}
		end, err := skipString(b, i)
		if err != nil {
			return value{}, i, err
		}
		key, err := unquote(b[i:end])
		if err != nil {
			return value{}, i, err
		}
		i = skipWS(b, end)
		if i >= len(b) || b[i] != ':' {
			return value{}, i, errSyntax
		}
		var v value
		v, i, err = parseAt(b, skipWS(b, i+1))
		if err != nil {
			return value{}, i, err
		}
		if n := len(o.members); n > 0 && o.members[n-1].key >= key {
			sorted = false
		}
		o.members = append(o.members, member{key: key, val: v})
		i = skipWS(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipWS(b, i+1)
			continue
		}
		if i < len(b) && b[i] == '}' {
			i++
			break
		}
		return value{}, i, errSyntax
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
	return value{obj: o}, i, nil
}

// unquote decodes a JSON string token; the common case has no escapes.
func unquote(tok []byte) (string, error) {
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

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func skipString(b []byte, i int) (int, error) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
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
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		if j == i {
			return i, errSyntax
		}
		return j, nil
	}
}
