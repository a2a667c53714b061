package effect

import (
	"slices"
	"testing"
)

// TestConditionFieldsAreTheEnvelope: the fields Condition.Check accepts are
// exactly those a condition can read (envelopeField, and payload), so that
// no condition passes the check and then never matches, and none that
// could match is refused.
func TestConditionFieldsAreTheEnvelope(t *testing.T) {
	readable := []string{"aggregateVersion", "payload"}
	for _, f := range envelopeStrings {
		readable = append(readable, f.name)
	}
	got := slices.Clone(conditionFields)
	slices.Sort(got)
	slices.Sort(readable)
	if !slices.Equal(got, readable) {
		t.Fatalf("Condition.Check accepts %q, conditions read %q", got, readable)
	}
}
