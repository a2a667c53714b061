package effect_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/projection"
	"github.com/projector-dev/projector/sideeffects/effect"
)

func mustRules(t *testing.T, effects ...effect.Rule) *effect.Rules {
	t.Helper()
	r, err := effect.NewRules(effects)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func decodeEvent(t *testing.T, raw string) *envelope.Event {
	t.Helper()
	ev, err := envelope.Decode([]byte(raw), 0)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestRulesIntents(t *testing.T) {
	r := mustRules(t,
		effect.Rule{Name: "sla", On: []string{"CaseEscalated"},
			When: &effect.Condition{Field: "payload.reasonCode", Equals: "SLA_BREACH"},
			Key:  "email:case:{aggregateId}:sla-breach:v{aggregateVersion}"},
		effect.Rule{Name: "all", On: []string{"CaseEscalated", "CaseClosed"},
			Key: "{effect}|{projection}|{eventId}|{eventType}|{aggregateType}|{tenantId}|{payload.customer.id}|{payload.n}|{payload.flag}|{payload.list.1}"},
		effect.Rule{Name: "big", On: []string{"CaseEscalated"},
			When: &effect.Condition{Field: "payload.n", Equals: float64(3)}, Key: "big:{aggregateId}"},
		effect.Rule{Name: "tenant", On: []string{"CaseEscalated"},
			When: &effect.Condition{Field: "tenantId", Equals: "T1"}, Key: "t:{tenantId}:{aggregateId}"},
		effect.Rule{Name: "vers", On: []string{"CaseEscalated"},
			When: &effect.Condition{Field: "aggregateVersion", Equals: float64(7)}, Key: "v:{aggregateVersion}"},
	)
	full := `{"eventId":"E1","eventType":"CaseEscalated","aggregateId":"CASE-1","aggregateType":"RegulatoryCase",
		"aggregateVersion":7,"tenantId":"T1","payload":{"reasonCode":"SLA_BREACH","customer":{"id":"C9"},"n":3.0,"flag":true,"list":["a","b"]}}`
	for _, tc := range []struct {
		name    string
		raw     string
		version int64
		want    []projection.Intent
		errFor  []string // effects reported as *KeyError
	}{
		{name: "all match", raw: full, version: 7, want: []projection.Intent{
			{Effect: "sla", Key: "email:case:CASE-1:sla-breach:v7"},
			{Effect: "all", Key: "all|case-overview|E1|CaseEscalated|RegulatoryCase|T1|C9|3.0|true|b"},
			{Effect: "big", Key: "big:CASE-1"},
			{Effect: "tenant", Key: "t:T1:CASE-1"},
			{Effect: "vers", Key: "v:7"},
		}},
		{name: "type not in on", raw: `{"eventId":"E2","eventType":"CaseOpened","aggregateId":"A"}`, version: 1},
		{name: "when does not match; missing payload path reported",
			raw:     `{"eventId":"E3","eventType":"CaseEscalated","aggregateId":"A","aggregateVersion":2,"tenantId":"T2","payload":{"reasonCode":"OTHER"}}`,
			version: 2, errFor: []string{"all"}},
		{name: "no payload at all: when fails quietly, key missing reported",
			raw:     `{"eventId":"E4","eventType":"CaseEscalated","aggregateId":"A"}`,
			version: 5, errFor: []string{"all"}},
		{name: "second type of on; object value is not a key component",
			raw:     `{"eventId":"E5","eventType":"CaseClosed","aggregateId":"A","aggregateType":"X","tenantId":"T","payload":{"customer":{"id":{"x":1}},"n":1,"flag":false,"list":[0,1]}}`,
			version: 1, errFor: []string{"all"}},
		{name: "second type of on, all present",
			raw:     `{"eventId":"E6","eventType":"CaseClosed","aggregateId":"A","aggregateType":"X","tenantId":"T","payload":{"customer":{"id":12},"n":1,"flag":false,"list":[0,"z"]}}`,
			version: 1, want: []projection.Intent{{Effect: "all", Key: "all|case-overview|E6|CaseClosed|X|T|12|1|false|z"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.Intents("case-overview", decodeEvent(t, tc.raw), tc.version)
			if !slices.Equal(got, tc.want) {
				t.Errorf("intents\n got %v\nwant %v", got, tc.want)
			}
			var failed []string
			for _, e := range unjoin(err) {
				var ke *effect.KeyError
				if !errors.As(e, &ke) || !errors.Is(e, effect.ErrNoValue) {
					t.Fatalf("error %v is not a *KeyError wrapping ErrNoValue", e)
				}
				failed = append(failed, ke.Effect)
			}
			if !slices.Equal(failed, tc.errFor) {
				t.Errorf("key errors for %v, want %v (err %v)", failed, tc.errFor, err)
			}
		})
	}
}

func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// {aggregateVersion} prefers the envelope's version, so two projections (one
// unversioned, counting its own applications) emit the same key.
func TestRulesAggregateVersionSource(t *testing.T) {
	r := mustRules(t, effect.Rule{Name: "x", On: []string{"T"}, Key: "x:{aggregateId}:{aggregateVersion}"})
	withV := decodeEvent(t, `{"eventId":"E","eventType":"T","aggregateId":"A","aggregateVersion":4}`)
	a, _ := r.Intents("p1", withV, 4)
	b, _ := r.Intents("p2", withV, 17)
	if len(a) != 1 || len(b) != 1 || a[0] != b[0] || a[0].Key != "x:A:4" {
		t.Fatalf("keys %v %v", a, b)
	}
	noV := decodeEvent(t, `{"eventId":"E","eventType":"T","aggregateId":"A"}`)
	if got, err := r.Intents("p", noV, 9); err != nil || got[0].Key != "x:A:9" {
		t.Fatalf("fallback to applied version: %v %v", got, err)
	}
	if got, err := r.Intents("p", noV, 0); len(got) != 0 || err == nil {
		t.Fatalf("no version at all must be reported: %v %v", got, err)
	}
	if _, err := effect.NewRules([]effect.Rule{{Name: "bad", On: []string{"T"}, Key: "{nope}"}}); err == nil {
		t.Fatal("bad template accepted")
	}
	if se, ok := r.Effect("x"); !ok || se.Key != "x:{aggregateId}:{aggregateVersion}" {
		t.Fatal("Effect lookup")
	}
}

// TestNewRulesRefuses: a rule that could never yield a correct intent is
// refused with an error naming it, since a library user's rules pass no
// configuration validation first.
func TestNewRulesRefuses(t *testing.T) {
	ok := effect.Rule{Name: "a", On: []string{"T"}, Key: "a:{aggregateId}"}
	for _, tc := range []struct {
		name  string
		rules []effect.Rule
		want  string // in the error
		as    any    // the error it wraps, if typed
	}{
		{"no name", []effect.Rule{{On: []string{"T"}, Key: "k"}}, "sideeffects: rule 0: a name is required", nil},
		{"same name twice", []effect.Rule{ok, ok}, "sideeffects: effect a: the name of an earlier rule", nil},
		{"no event type", []effect.Rule{{Name: "b", Key: "k"}}, "sideeffects: effect b: at least one event type", nil},
		{"no key", []effect.Rule{{Name: "b", On: []string{"T"}}}, "sideeffects: effect b: a key template is required", nil},
		{"bad key", []effect.Rule{{Name: "b", On: []string{"T"}, Key: "x:{nope}"}},
			`sideeffects: effect b: config: template "x:{nope}": unknown placeholder {nope}`, new(*effect.TemplateError)},
		{"bad condition field", []effect.Rule{{Name: "b", On: []string{"T"}, Key: "k", When: &effect.Condition{Field: "eventType.x", Equals: "v"}}},
			`sideeffects: effect b: sideeffects: condition field: only payload has nested fields, got "eventType.x"`, new(*effect.ConditionError)},
		{"condition without value", []effect.Rule{{Name: "b", On: []string{"T"}, Key: "k", When: &effect.Condition{Field: "payload.x"}}},
			"sideeffects: effect b: sideeffects: condition equals: required", new(*effect.ConditionError)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := effect.NewRules(tc.rules)
			if err == nil || r != nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewRules = %v, %v; want an error containing %q", r, err, tc.want)
			}
			if tc.as != nil && !errors.As(err, tc.as) {
				t.Errorf("%v does not wrap a %T", err, tc.as)
			}
		})
	}
}

// TestConditionCheck: every way a condition's field can miss the envelope,
// each reported under the member ("field", "equals") the configuration
// reports it under, both at once when both are wrong.
func TestConditionCheck(t *testing.T) {
	for _, tc := range []struct {
		c    effect.Condition
		want []string // member: reason prefix
	}{
		{effect.Condition{Field: "payload.a.0", Equals: 1.0}, nil},
		{effect.Condition{Field: "aggregateVersion", Equals: 3.0}, nil},
		{effect.Condition{Field: "", Equals: "x"}, []string{"field: required"}},
		{effect.Condition{Field: "body.x", Equals: "x"}, []string{"field: must start with an envelope field (eventId, "}},
		{effect.Condition{Field: "tenantId.x", Equals: "x"}, []string{"field: only payload has nested fields"}},
		{effect.Condition{Field: "payload..x", Equals: "x"}, []string{`field: empty path segment in "payload..x"`}},
		{effect.Condition{Field: "nope"}, []string{"field: must start", "equals: required (a string"}},
	} {
		var got []string
		for _, e := range unjoin(tc.c.Check()) {
			var ce *effect.ConditionError
			if !errors.As(e, &ce) {
				t.Fatalf("%+v: %v is not a *ConditionError", tc.c, e)
			}
			got = append(got, ce.Member+": "+ce.Reason)
		}
		if len(got) != len(tc.want) {
			t.Fatalf("%+v: Check = %q, want %q", tc.c, got, tc.want)
		}
		for i := range got {
			if !strings.HasPrefix(got[i], tc.want[i]) {
				t.Errorf("%+v: Check = %q, want %q", tc.c, got, tc.want)
			}
		}
	}
}

// TestNewRulesCopies: a rule changed by its caller after NewRules (or one
// Effect returned) does not change what Rules derives, and an event type
// listed twice in On is one trigger.
func TestNewRulesCopies(t *testing.T) {
	rules := []effect.Rule{{Name: "a", On: []string{"T", "T"}, Key: "a:{aggregateId}",
		When: &effect.Condition{Field: "tenantId", Equals: "t1"}}}
	r := mustRules(t, rules...)
	rules[0].On[0], rules[0].When.Field = "U", "eventId"
	got, _ := r.Effect("a")
	got.On[1], got.When.Equals = "U", "t2"
	in, err := r.Intents("p", decodeEvent(t, `{"eventId":"E","eventType":"T","aggregateId":"A","tenantId":"t1"}`), 1)
	if err != nil || !slices.Equal(in, []projection.Intent{{Effect: "a", Key: "a:A"}}) {
		t.Fatalf("intents %v %v", in, err)
	}
}

func TestIntentValueRoundTrip(t *testing.T) {
	raw := " {\"eventId\":\"E\\\"1\",\"eventType\":\"T\",\"aggregateId\":\"A\\n1\",\"aggregateVersion\":3,\"payload\":{\"x\":[1,2]}}\n"
	ev := decodeEvent(t, raw)
	v := effect.IntentValue(projection.Intent{Effect: "fx", Key: "k:\"q\"\\\t\x01"}, "proj", ev, 3, []byte(raw))
	if !json.Valid(v) {
		t.Fatalf("not JSON: %s", v)
	}
	// The exact member order of docs/contract.md#side-effect-intents-topic.
	var keys []string
	d := json.NewDecoder(bytes.NewReader(v))
	d.Token()
	for d.More() {
		k, _ := d.Token()
		keys = append(keys, k.(string))
		var skip json.RawMessage
		d.Decode(&skip)
	}
	if want := []string{"key", "effect", "projection", "aggregateId", "aggregateVersion", "eventId", "event"}; !slices.Equal(keys, want) {
		t.Fatalf("members %v, want %v", keys, want)
	}
	in, err := effect.ParseIntent(v)
	if err != nil {
		t.Fatal(err)
	}
	if in.Key != "k:\"q\"\\\t\x01" || in.Effect != "fx" || in.Projection != "proj" || in.AggregateID != "A\n1" ||
		in.AggregateVersion != 3 || in.EventID != "E\"1" || string(in.Value) != string(v) {
		t.Fatalf("parsed %+v", in)
	}
	back, err := envelope.Decode(in.Event, 0)
	if err != nil || back.EventID != ev.EventID || string(back.Payload) != `{"x":[1,2]}` {
		t.Fatalf("embedded event %s: %v", in.Event, err)
	}
	for _, bad := range []string{``, `[]`, `{"key":"","effect":"x"}`, `{"key":"k"}`, `{"key":1,"effect":"x"}`} {
		if _, err := effect.ParseIntent([]byte(bad)); !errors.Is(err, effect.ErrBadIntent) {
			t.Errorf("ParseIntent(%q) = %v", bad, err)
		}
	}
}
