package projection

import (
	"fmt"

	"github.com/projector-dev/projector/internal/core/jsonmerge"
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
var ErrPayloadNotObject = jsonmerge.ErrNotObject

// Apply implements Handler.
func (r Rules) Apply(state []byte, ev *Event) (Result, error) {
	res, patch, err := r.decide(ev)
	if patch == nil || err != nil {
		return res, err
	}
	out, err := MergePatch(state, patch)
	if err != nil {
		return Result{}, err
	}
	return Result{State: out}, nil
}

// decide is Apply up to the merge itself: patch is the payload object to
// merge into the state, or nil when res, err is the whole result. (The
// version guard merges into a pooled scratch buffer instead, through
// jsonmerge: internal/engine/guard, Guard.run.)
func (r Rules) decide(ev *Event) (res Result, patch []byte, err error) {
	switch r[ev.EventType] {
	case Delete:
		return Result{Delete: true}, nil, nil
	case Merge:
		p, err := jsonmerge.Patch(ev.Payload)
		if p == nil && err == nil {
			return Result{Keep: true}, nil, nil // nothing to merge
		}
		return Result{}, p, err
	default:
		return Result{Keep: true}, nil, nil
	}
}
