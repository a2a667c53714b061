package effect

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/projection"
)

// Rules derives side-effect intents from applied events according to the
// sideEffects configuration. It is immutable and safe for concurrent use.
type Rules struct {
	effects []compiledRule
	byType  map[string][]int // eventType -> indexes into effects, in config order
}

type compiledRule struct {
	cfg  config.SideEffect
	key  config.Template
	when *config.Condition
	path []string // when.Path()
}

// KeyError reports an effect that matched an event but whose idempotency key
// could not be built from it (a placeholder without a value). No intent is
// produced for that effect. Err wraps config.ErrNoValue.
type KeyError struct {
	Effect, EventID string
	Err             error
}

func (e *KeyError) Error() string {
	return fmt.Sprintf("sideeffects: effect %s: event %s: %v", e.Effect, e.EventID, e.Err)
}

func (e *KeyError) Unwrap() error { return e.Err }

// NewRules compiles the configured effects. It fails only for effects that
// would not pass config validation (bad key template).
func NewRules(effects []Rule) (*Rules, error) {
	r := &Rules{byType: make(map[string][]int)}
	for i, se := range effects {
		tpl, err := se.KeyTemplate()
		if err != nil {
			return nil, fmt.Errorf("sideeffects: effect %s: %w", se.Name, err)
		}
		ru := compiledRule{cfg: se, key: tpl, when: se.When}
		if se.When != nil {
			ru.path = se.When.Path()
		}
		r.effects = append(r.effects, ru)
		for _, t := range se.On {
			r.byType[t] = append(r.byType[t], i)
		}
	}
	return r, nil
}

// Effect returns the configuration of the named effect.
func (r *Rules) Effect(name string) (Rule, bool) {
	for _, ru := range r.effects {
		if ru.cfg.Name == name {
			return ru.cfg, true
		}
	}
	return Rule{}, false
}

// Intents returns one intent per configured effect that the event triggers,
// in configuration order: the event's type is listed in `on` and the
// optional `when` condition matches. projectionName fills {projection};
// version is the version the projection applied.
//
// An effect whose key template has a placeholder without a value produces no
// intent; the returned error then joins one *KeyError per such effect, and
// the intents of the other effects are still returned. It is the caller's
// choice whether that is fatal (the processor counts and logs it). Missing
// means: a payload path that is not there or does not lead to a string,
// number or boolean; an absent tenantId or aggregateType; no version at all.
//
// {aggregateVersion} is the envelope's aggregateVersion when present, else
// version: the key then does not depend on which projection emitted it, so
// the same fact emitted by two projections yields one key and one execution.
//
// A `when` condition on a field the event does not have does not match (no
// intent, no error).
func (r *Rules) Intents(projectionName string, ev *projection.Event, version int64) ([]projection.Intent, error) {
	idx := r.byType[ev.EventType]
	if len(idx) == 0 {
		return nil, nil
	}
	p := payloadCache{raw: ev.Payload}
	env := (*envelope.Event)(ev) // the same fields: a pointer conversion, no copy
	var (
		out  []projection.Intent
		errs []error
	)
	for _, i := range idx {
		ru := &r.effects[i]
		if ru.when != nil {
			v, ok := conditionValue(env, ru.path, &p)
			if !ok || !ru.when.Match(normalize(v)) {
				continue
			}
		}
		key, err := ru.key.Expand(func(name string) (string, bool) {
			return placeholder(name, ru.cfg.Name, projectionName, env, version, &p)
		})
		if err != nil {
			errs = append(errs, &KeyError{Effect: ru.cfg.Name, EventID: ev.EventID, Err: err})
			continue
		}
		out = append(out, projection.Intent{Effect: ru.cfg.Name, Key: key})
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
// recursively, so that Condition.Match compares them like the float64s YAML
// gives it (1 and 1.0 equal, nested numbers included).
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
	if path, ok := strings.CutPrefix(name, config.PayloadPrefix); ok {
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
