package projection

import "fmt"

// Policy is what to do with a gap that outlived the hold timeout.
type Policy uint8

const (
	// Wait keeps holding (the gap is only reported).
	Wait Policy = iota
	// Skip applies the held events past the gap, lowest version first.
	Skip
	// DeadLetter drops the held events to the dead-letter topic.
	DeadLetter
)

// policyNames spell each Policy as gaps.onTimeout does; parsing and
// printing share them.
var policyNames = [...]string{Wait: "wait", Skip: "skip", DeadLetter: "deadletter"}

// ParsePolicy parses gaps.onTimeout ("" is wait).
func ParsePolicy(s string) (Policy, error) {
	if s == "" {
		return Wait, nil
	}
	for p, name := range policyNames {
		if s == name {
			return Policy(p), nil
		}
	}
	return Wait, fmt.Errorf("projection: unknown gap policy %q (want wait, skip or deadletter)", s)
}

// String is the policy as gaps.onTimeout spells it ("wait" for a value
// that is not a Policy).
func (p Policy) String() string {
	if int(p) < len(policyNames) {
		return policyNames[p]
	}
	return "wait"
}
