package projection

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// Rule is a declarative state change.
type Rule uint8

const (
	// Advance leaves the state unchanged; the version still advances.
	Advance Rule = iota
	// Merge applies the payload to the state as an RFC 7386 JSON merge patch.
	Merge
	// Delete removes the state (a tombstone); the version is remembered.
	Delete
)

// ParseRule parses a configured rule name.
func ParseRule(s string) (Rule, error) {
	switch s {
	case "merge":
		return Merge, nil
	case "delete":
		return Delete, nil
	}
	return Advance, fmt.Errorf("projection: unknown rule %q (want merge or delete)", s)
}

// Rules is the declarative Handler: eventType → rule; unlisted types advance
// the version only.
type Rules map[string]Rule

// ErrPayloadNotObject is returned when a merge payload is not a JSON object.
var ErrPayloadNotObject = errors.New("projection: merge payload is not a JSON object")

// Apply implements Handler.
func (r Rules) Apply(state []byte, ev *Event) (Result, error) {
	switch r[ev.EventType] {
	case Delete:
		return Result{Delete: true}, nil
	case Merge:
		p := bytes.TrimSpace(ev.Payload)
		if len(p) == 0 || bytes.Equal(p, []byte("null")) {
			return Result{Keep: true}, nil // nothing to merge
		}
		if p[0] != '{' {
			return Result{}, ErrPayloadNotObject
		}
		out, err := MergePatch(state, p)
		if err != nil {
			return Result{}, err
		}
		return Result{State: out}, nil
	default:
		return Result{Keep: true}, nil
	}
}

// MergePatch applies an RFC 7386 merge patch to a JSON object document and
// returns the result with object members in sorted order (so equal states are
// equal bytes). Numbers keep their original spelling.
func MergePatch(doc, patch []byte) ([]byte, error) {
	var target any
	if len(doc) > 0 {
		if err := unmarshal(doc, &target); err != nil {
			return nil, fmt.Errorf("projection: state: %w", err)
		}
	}
	var p any
	if err := unmarshal(patch, &p); err != nil {
		return nil, fmt.Errorf("projection: payload: %w", err)
	}
	out, err := json.Marshal(mergeValue(target, p))
	if err != nil {
		return nil, fmt.Errorf("projection: encode state: %w", err)
	}
	return out, nil
}

func unmarshal(b []byte, v *any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

// mergeValue is RFC 7386 MergePatch(Target, Patch).
func mergeValue(target, patch any) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	tm, ok := target.(map[string]any)
	if !ok {
		tm = make(map[string]any, len(pm))
	}
	for k, v := range pm {
		if v == nil {
			delete(tm, k)
			continue
		}
		tm[k] = mergeValue(tm[k], v)
	}
	return tm
}
