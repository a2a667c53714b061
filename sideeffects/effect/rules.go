package effect

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/projection"
)

// Rule is one side effect as the processor derives it: the event types and
// the optional condition that trigger it, and the template of its
// idempotency key. How the effect is then called (its Caller, retry policy
// and timeout) is the executor's sideeffects.Effect, under the same Name.
type Rule struct {
	// Name names the effect: the effect of every intent it yields, and the
	// executor's key for it. Required, unique among the rules.
	Name string
	// On lists the event types that trigger it; at least one.
	On []string
	// When, if set, restricts it to events that match the condition.
	When *Condition
	// Key is the idempotency key template (ParseTemplate), such as
	// "email:case:{aggregateId}:sla-breach:v{aggregateVersion}"; required.
	Key string
}

// Rules derives side-effect intents from applied events according to the
// configured Rules. It is immutable and safe for concurrent use.
type Rules struct {
	effects []compiledRule
	byType  map[string][]int // eventType -> indexes into effects, in the rules' order
}

type compiledRule struct {
	rule Rule
	key  Template
	path []string // rule.When.Path()
}

// KeyError reports an effect that matched an event but whose idempotency key
// could not be built from it (a placeholder without a value). No intent is
// produced for that effect. Err wraps ErrNoValue.
type KeyError struct {
	Effect, EventID string
	Err             error
}

func (e *KeyError) Error() string {
	return fmt.Sprintf("sideeffects: effect %s: event %s: %v", e.Effect, e.EventID, e.Err)
}

func (e *KeyError) Unwrap() error { return e.Err }

// NewRules compiles the rules. It refuses a rule without a name, with a
// name already used, without an event type, without a key template or with
// one that does not parse (a *TemplateError) or with a condition Condition.Check refuses
// (a *ConditionError), naming the rule: a rule that could never yield an
// intent is an error, not a silent no-op. Rules keeps copies of each rule's
// On and When.
func NewRules(rules []Rule) (*Rules, error) {
	r := &Rules{byType: make(map[string][]int)}
	seen := make(map[string]bool, len(rules))
	for i, ru := range rules {
		c, err := compile(ru, seen)
		if err != nil {
			if ru.Name == "" {
				return nil, fmt.Errorf("sideeffects: rule %d: %w", i, err)
			}
			return nil, fmt.Errorf("sideeffects: effect %s: %w", ru.Name, err)
		}
		r.effects = append(r.effects, c)
		for _, t := range ru.On {
			if idx := r.byType[t]; len(idx) == 0 || idx[len(idx)-1] != i { // On: [A, A] is one trigger
				r.byType[t] = append(idx, i)
			}
		}
	}
	return r, nil
}

// compile checks one rule and parses its key; seen holds the names of the
// rules before it.
func compile(ru Rule, seen map[string]bool) (compiledRule, error) {
	switch {
	case ru.Name == "":
		return compiledRule{}, errors.New("a name is required")
	case seen[ru.Name]:
		return compiledRule{}, errors.New("the name of an earlier rule too")
	case len(ru.On) == 0:
		return compiledRule{}, errors.New("at least one event type (On) is required")
	case ru.Key == "":
		// Every intent would have the key "": one execution, ever.
		return compiledRule{}, errors.New("a key template is required")
	}
	seen[ru.Name] = true
	tpl, err := ParseTemplate(ru.Key)
	if err != nil {
		return compiledRule{}, err
	}
	if ru.When != nil {
		if err := ru.When.Check(); err != nil {
			return compiledRule{}, err
		}
	}
	c := compiledRule{rule: ru.clone(), key: tpl}
	if c.rule.When != nil {
		c.path = c.rule.When.Path()
	}
	return c, nil
}

// Effect returns (a copy of) the rule of the named effect.
func (r *Rules) Effect(name string) (Rule, bool) {
	for _, ru := range r.effects {
		if ru.rule.Name == name {
			return ru.rule.clone(), true
		}
	}
	return Rule{}, false
}

// clone copies the rule's On and When, so that the copy and the rule share
// nothing a caller may change (Equals aside: a value it only reads).
func (ru Rule) clone() Rule {
	ru.On = append([]string(nil), ru.On...)
	if ru.When != nil {
		when := *ru.When
		ru.When = &when
	}
	return ru
}

// Intents returns one intent per rule that the event triggers, in the
// rules' order: the event's type is listed in On and the optional When
// condition matches. projectionName fills {projection}; version is the
// version the projection applied.
//
// A rule whose key template has a placeholder without a value produces no
// intent; the returned error then joins one *KeyError per such rule, and
// the intents of the other rules are still returned. It is the caller's
// choice whether that is fatal (the processor counts and logs it). Missing
// means: a payload path that is not there or does not lead to a string,
// number or boolean; an absent tenantId or aggregateType; no version at all.
//
// {aggregateVersion} is the envelope's aggregateVersion when present, else
// version: the key then does not depend on which projection emitted it, so
// the same fact emitted by two projections yields one key and one execution.
//
// A When condition on a field the event does not have does not match (no
// intent, no error).
func (r *Rules) Intents(projectionName string, ev *projection.Event, version int64) ([]projection.Intent, error) {
	idx := r.byType[ev.EventType]
	if len(idx) == 0 {
		return nil, nil
	}
	p := payloadCache{raw: ev.Payload}
	var (
		out  []projection.Intent
		errs []error
	)
	for _, i := range idx {
		ru := &r.effects[i]
		if ru.rule.When != nil {
			v, ok := conditionValue(ev, ru.path, &p)
			if !ok || !ru.rule.When.Match(normalize(v)) {
				continue
			}
		}
		key, err := ru.key.Expand(func(name string) (string, bool) {
			return placeholder(name, ru.rule.Name, projectionName, ev, version, &p)
		})
		if err != nil {
			errs = append(errs, &KeyError{Effect: ru.rule.Name, EventID: ev.EventID, Err: err})
			continue
		}
		out = append(out, projection.Intent{Effect: ru.rule.Name, Key: key})
	}
	return out, errors.Join(errs...)
}

// payloadCache decodes the payload at most once per event, and only if some
// effect looks into it.
type payloadCache struct {
	raw     []byte
	decoded bool
	v       any
	ok      bool
}

func (p *payloadCache) get() (any, bool) {
	if !p.decoded {
		p.decoded = true
		if p.raw != nil {
			d := json.NewDecoder(bytes.NewReader(p.raw))
			d.UseNumber() // keeps number literals exact for keys
			p.ok = d.Decode(&p.v) == nil
		}
	}
	return p.v, p.ok
}

// walk follows path (object members; decimal indexes into arrays) from v.
func walk(v any, path []string) (any, bool) {
	for _, seg := range path {
		switch c := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = c[seg]; !ok {
				return nil, false
			}
		case []any:
			n, err := strconv.Atoi(seg)
			if err != nil || n < 0 || n >= len(c) {
				return nil, false
			}
			v = c[n]
		default:
			return nil, false
		}
	}
	return v, true
}

// envelopeStrings are the envelope's top-level string fields that a `when`
// condition or a key placeholder may name (aggregateVersion, a number, is
// envelopeField's own case).
var envelopeStrings = [...]struct {
	name string
	get  func(*envelope.Event) string
}{
	{"eventId", func(ev *envelope.Event) string { return ev.EventID }},
	{"eventType", func(ev *envelope.Event) string { return ev.EventType }},
	{"aggregateId", func(ev *envelope.Event) string { return ev.AggregateID }},
	{"aggregateType", func(ev *envelope.Event) string { return ev.AggregateType }},
	{"tenantId", func(ev *envelope.Event) string { return ev.TenantID }},
	{"occurredAt", func(ev *envelope.Event) string { return ev.OccurredAt }},
	{"correlationId", func(ev *envelope.Event) string { return ev.CorrelationID }},
	{"causationId", func(ev *envelope.Event) string { return ev.CausationID }},
	{"producer", func(ev *envelope.Event) string { return ev.Producer }},
}

// envelopeField returns a top-level envelope field other than payload; ok is
// false when the event does not have it.
func envelopeField(ev *envelope.Event, name string) (any, bool) {
	if name == "aggregateVersion" {
		if ev.AggregateVersion < 1 {
			return nil, false
		}
		return ev.AggregateVersion, true
	}
	for i := range envelopeStrings {
		if f := &envelopeStrings[i]; f.name == name {
			s := f.get(ev)
			return s, s != ""
		}
	}
	return nil, false
}

func conditionValue(ev *envelope.Event, path []string, p *payloadCache) (any, bool) {
	if len(path) == 0 {
		return nil, false
	}
	if path[0] != "payload" {
		if len(path) != 1 {
			return nil, false
		}
		return envelopeField(ev, path[0])
	}
	v, ok := p.get()
	if !ok {
		return nil, false
	}
	return walk(v, path[1:])
}

// normalize turns the json.Number values of a UseNumber decode into float64,
// recursively, so that Condition.Match compares them like the float64s that
// YAML and encoding/json give Equals (1 and 1.0 equal, nested numbers
// included).
func normalize(v any) any {
	switch c := v.(type) {
	case json.Number:
		if f, err := c.Float64(); err == nil {
			return f
		}
		return c.String()
	case map[string]any:
		m := make(map[string]any, len(c))
		for k, e := range c {
			m[k] = normalize(e)
		}
		return m
	case []any:
		s := make([]any, len(c))
		for i, e := range c {
			s[i] = normalize(e)
		}
		return s
	}
	return v
}

func placeholder(name, effect, projectionName string, ev *envelope.Event, version int64, p *payloadCache) (string, bool) {
	switch name {
	case "effect":
		return effect, true
	case "projection":
		return projectionName, projectionName != ""
	case "aggregateVersion":
		switch {
		case ev.AggregateVersion >= 1:
			return strconv.FormatInt(ev.AggregateVersion, 10), true
		case version >= 1:
			return strconv.FormatInt(version, 10), true
		}
		return "", false
	}
	if path, ok := strings.CutPrefix(name, payloadPrefix); ok {
		root, ok := p.get()
		if !ok {
			return "", false
		}
		v, ok := walk(root, strings.Split(path, "."))
		if !ok {
			return "", false
		}
		switch s := v.(type) {
		case string:
			return s, true
		case json.Number:
			return s.String(), true
		case bool:
			return strconv.FormatBool(s), true
		}
		return "", false // null, object or array: not a key component
	}
	v, ok := envelopeField(ev, name)
	if !ok {
		return "", false
	}
	if s, isStr := v.(string); isStr {
		return s, true
	}
	return fmt.Sprint(v), true
}
