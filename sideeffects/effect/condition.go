package effect

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Condition restricts a Rule to events whose Field equals Equals.
type Condition struct {
	// Field is a dotted path into the event envelope: an envelope field name
	// (eventId, eventType, aggregateId, aggregateType, aggregateVersion,
	// tenantId, occurredAt, correlationId, causationId, producer), or
	// payload / payload.<path>. An event without the field does not match.
	Field string
	// Equals is the value to compare with; required, not nil. It holds what
	// encoding/json decodes into an any (string, float64, bool, []any,
	// map[string]any), or any other value with a JSON encoding.
	Equals any
}

// conditionFields are the envelope fields a Condition's Field may start
// with, in the order messages list them (envelopeField reads every one but
// payload; TestConditionFieldsAreTheEnvelope holds the two together).
var conditionFields = []string{
	"eventId", "eventType", "aggregateId", "aggregateType", "aggregateVersion",
	"tenantId", "occurredAt", "correlationId", "causationId", "producer", "payload",
}

// Path returns Field split at the dots, e.g. ["payload", "reasonCode"].
func (c *Condition) Path() []string { return strings.Split(c.Field, ".") }

// Match reports whether v, the value found at Field, equals Equals. Values
// are compared by their JSON encodings, so 1 and 1.0 match, and objects
// match regardless of key order.
func (c *Condition) Match(v any) bool {
	a, err1 := json.Marshal(normalizeNumber(v))
	b, err2 := json.Marshal(normalizeNumber(c.Equals))
	return err1 == nil && err2 == nil && bytes.Equal(a, b)
}

func normalizeNumber(v any) any {
	if n, ok := v.(json.Number); ok {
		if f, err := n.Float64(); err == nil {
			return f
		}
	}
	return v
}

// ConditionError is a Condition that Check refuses. Member names the part,
// as the configuration file spells it ("field" or "equals"), and Reason says
// what is wrong with it, without the key the configuration reports it
// under.
type ConditionError struct {
	Member string
	Reason string
}

// Error returns "sideeffects: condition <member>: <reason>".
func (e *ConditionError) Error() string {
	return fmt.Sprintf("sideeffects: condition %s: %s", e.Member, e.Reason)
}

// Check reports what makes c a condition that could never mean what it
// says: a Field that is not a path into the envelope, or no Equals. The
// error is a *ConditionError, or an errors.Join of both.
func (c *Condition) Check() error {
	var errs []error
	if reason := checkField(c.Field); reason != "" {
		errs = append(errs, &ConditionError{Member: "field", Reason: reason})
	}
	if c.Equals == nil {
		errs = append(errs, &ConditionError{Member: "equals", Reason: "required (a string, number, boolean, list or mapping; not null)"})
	}
	return errors.Join(errs...)
}

// checkField says what is wrong with a condition's field ("" when nothing
// is).
func checkField(field string) string {
	if field == "" {
		return "required: an envelope field such as eventType or payload.reasonCode"
	}
	segs := strings.Split(field, ".")
	if !slices.Contains(conditionFields, segs[0]) {
		return fmt.Sprintf("must start with an envelope field (%s), got %q", strings.Join(conditionFields, ", "), field)
	}
	if len(segs) > 1 && segs[0] != "payload" {
		return fmt.Sprintf("only payload has nested fields, got %q", field)
	}
	if slices.Contains(segs, "") {
		return fmt.Sprintf("empty path segment in %q", field)
	}
	return ""
}
