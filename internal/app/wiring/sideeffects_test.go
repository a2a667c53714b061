package wiring

import (
	"encoding/base64"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/projection"
	"github.com/projector-dev/projector/sideeffects/effect"
	"github.com/projector-dev/projector/sideeffects/webhook"
)

// sideEffectsConfig is a valid configuration around the sideEffects given.
const sideEffectsConfig = `name: p
kafka: {brokers: [k:9092], input: [in], instanceId: i}
projections: [{name: p, topic: out, events: {A: merge}}]
sideEffects:
`

// secret returns a whsec_ secret of a 32-byte key filled with b.
func secret(b byte) webhook.SigningSecret {
	return webhook.SigningSecret(webhook.SigningSecretPrefix + base64.StdEncoding.EncodeToString([]byte(strings.Repeat(string(b), 32))))
}

// TestSideEffectsConversion: a configuration file's sideEffects, parsed as
// the CLI parses them (defaults applied, environment resolved), convert to
// the effect.Rule and webhook.Config they mean: durations, conditions (as
// YAML decodes their values), key templates, signing secrets in each of
// their forms, and the library's own defaults for what the file leaves out.
func TestSideEffectsConversion(t *testing.T) {
	env := map[string]string{"ROTATION": string(secret('n')) + " " + string(secret('o'))}
	for _, tc := range []struct {
		name string
		yaml string
		want []SideEffect
	}{
		{name: "defaults are the library's",
			yaml: `  - {name: fx, on: [A], key: "fx:{aggregateId}", webhook: {url: "http://h/x"}}`,
			want: []SideEffect{{
				Rule:        effect.Rule{Name: "fx", On: []string{"A"}, Key: "fx:{aggregateId}"},
				Webhook:     webhook.Config{URL: "http://h/x", Timeout: webhook.DefaultTimeout},
				MaxAttempts: effect.DefaultMaxAttempts, OnUnknown: effect.OnUnknownRetry,
			}}},
		{name: "everything set",
			yaml: `  - name: sla
    on: [A, B]
    when: {field: payload.reasonCode, equals: SLA_BREACH}
    key: "email:case:{aggregateId}:sla-breach:v{aggregateVersion}"
    webhook:
      url: https://h/notify
      timeout: 1m30s
      signingSecret: [` + string(secret('a')) + `, ` + string(secret('b')) + `]
    maxAttempts: 3
    onUnknown: park`,
			want: []SideEffect{{
				Rule: effect.Rule{Name: "sla", On: []string{"A", "B"},
					When: &effect.Condition{Field: "payload.reasonCode", Equals: "SLA_BREACH"},
					Key:  "email:case:{aggregateId}:sla-breach:v{aggregateVersion}"},
				Webhook: webhook.Config{URL: "https://h/notify", Timeout: 90 * time.Second,
					SigningSecret: webhook.SigningSecrets{secret('a'), secret('b')}},
				MaxAttempts: 3, OnUnknown: effect.OnUnknownPark,
			}}},
		{name: "condition values and secret forms, in order",
			yaml: `  - {name: n, on: [A], key: k, when: {field: payload.n, equals: 3}, webhook: {url: "http://h/1", timeout: 250ms, signingSecret: ` + string(secret('s')) + `}}
  - {name: o, on: [A], key: k, when: {field: payload.o, equals: {x: s, y: [1, true]}}, webhook: {url: "http://h/2", signingSecret: "${ROTATION}"}}
  - {name: v, on: [A], key: "{eventId}", when: {field: aggregateVersion, equals: 7}, webhook: {url: "http://h/3"}, maxAttempts: 1000}`,
			want: []SideEffect{
				{Rule: effect.Rule{Name: "n", On: []string{"A"}, Key: "k", When: &effect.Condition{Field: "payload.n", Equals: float64(3)}},
					Webhook:     webhook.Config{URL: "http://h/1", Timeout: 250 * time.Millisecond, SigningSecret: webhook.SigningSecrets{secret('s')}},
					MaxAttempts: effect.DefaultMaxAttempts, OnUnknown: effect.OnUnknownRetry},
				{Rule: effect.Rule{Name: "o", On: []string{"A"}, Key: "k",
					When: &effect.Condition{Field: "payload.o", Equals: map[string]any{"x": "s", "y": []any{float64(1), true}}}},
					Webhook:     webhook.Config{URL: "http://h/2", Timeout: webhook.DefaultTimeout, SigningSecret: webhook.SigningSecrets{secret('n'), secret('o')}},
					MaxAttempts: effect.DefaultMaxAttempts, OnUnknown: effect.OnUnknownRetry},
				{Rule: effect.Rule{Name: "v", On: []string{"A"}, Key: "{eventId}", When: &effect.Condition{Field: "aggregateVersion", Equals: float64(7)}},
					Webhook:     webhook.Config{URL: "http://h/3", Timeout: webhook.DefaultTimeout},
					MaxAttempts: 1000, OnUnknown: effect.OnUnknownRetry},
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(sideEffectsConfig+tc.yaml+"\n"), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
			if err != nil {
				t.Fatal(err)
			}
			got := SideEffects(cfg.SideEffects)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("SideEffects\n got %#v\nwant %#v", got, tc.want)
			}
			// What the executor is given: each effect's webhook, timeout
			// and retry policy.
			fx := effects(got)
			for _, w := range tc.want {
				e, ok := fx[w.Rule.Name]
				cl, isClient := e.Caller.(*webhook.Client)
				if !ok || !isClient || cl.URL != w.Webhook.URL || cl.Timeout != w.Webhook.Timeout || e.Timeout != w.Webhook.Timeout ||
					e.MaxAttempts != w.MaxAttempts || e.OnUnknown != w.OnUnknown {
					t.Fatalf("effect %s: %+v", w.Rule.Name, e)
				}
				checkSigner(t, cl, w.Webhook.SigningSecret)
			}
			if len(fx) != len(tc.want) {
				t.Fatalf("%d effects for %d side effects", len(fx), len(tc.want))
			}
		})
	}
}

// checkSigner: a client signs with exactly the configured secrets, or not
// at all without them.
func checkSigner(t *testing.T, cl *webhook.Client, want webhook.SigningSecrets) {
	t.Helper()
	if want == nil {
		if cl.Signer != nil {
			t.Fatal("signed without a secret")
		}
		return
	}
	ref, err := webhook.NewSigner(want)
	if err != nil {
		t.Fatal(err)
	}
	if cl.Signer == nil || cl.Signer.Sign("id", 1, []byte("{}")) != ref.Sign("id", 1, []byte("{}")) {
		t.Fatalf("signer %v does not sign with the %d configured secrets", cl.Signer, len(want))
	}
}

// TestSideEffectsShareNothing: the converted rules and webhooks do not
// change when the configuration they came from does.
func TestSideEffectsShareNothing(t *testing.T) {
	cfg, err := config.Parse([]byte(sideEffectsConfig+`  - {name: fx, on: [A], key: k, when: {field: eventType, equals: A}, webhook: {url: "http://h", signingSecret: `+string(secret('a'))+`}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	got := SideEffects(cfg.SideEffects)
	s := &cfg.SideEffects[0]
	s.On[0], s.When.Field, s.Webhook.SigningSecret[0] = "B", "eventId", secret('z')
	if w := got[0]; w.Rule.On[0] != "A" || w.Rule.When.Field != "eventType" || w.Webhook.SigningSecret[0] != secret('a') {
		t.Fatalf("the conversion shares the configuration's values: %+v", w)
	}
}

// TestEffectRules: the processor's rules of a configuration yield the
// intents its sideEffects describe, and none without sideEffects.
func TestEffectRules(t *testing.T) {
	cfg, err := config.Parse([]byte(sideEffectsConfig+`  - {name: sla, on: [A], key: "sla:{aggregateId}:v{aggregateVersion}", when: {field: payload.code, equals: 7}, webhook: {url: "http://h"}}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := EffectRules(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		payload string
		want    []projection.Intent
	}{
		{`{"code":7}`, []projection.Intent{{Effect: "sla", Key: "sla:C1:v3"}}},
		{`{"code":7.0}`, []projection.Intent{{Effect: "sla", Key: "sla:C1:v3"}}},
		{`{"code":"7"}`, nil},
	} {
		ev, err := envelope.Decode([]byte(`{"eventId":"E","eventType":"A","aggregateId":"C1","aggregateVersion":3,"payload":`+tc.payload+`}`), 0)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := r.Intents("p", ev, 3); err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("payload %s: intents %v, %v; want %v", tc.payload, got, err, tc.want)
		}
	}
	cfg.SideEffects = nil
	if r, err := EffectRules(cfg); r != nil || err != nil {
		t.Fatalf("without sideEffects: %v, %v", r, err)
	}
	cfg.SideEffects = []config.SideEffect{{Name: "bad", On: []string{"A"}, Key: "{nope}"}} // not validated
	if _, err := EffectRules(cfg); len(config.Errors(err)) != 1 || config.Errors(err)[0].Key != "sideEffects" {
		t.Fatalf("a bad template: %v", err)
	}
}
