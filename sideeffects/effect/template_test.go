package effect_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/projector-dev/projector/sideeffects/effect"
)

// TestTemplate was the configuration package's until issue 24 moved key
// templates into the side-effect domain; its cases are unchanged.
func TestTemplate(t *testing.T) {
	values := map[string]string{
		"eventId": "e1", "eventType": "T", "aggregateId": "CASE-1", "aggregateType": "Case",
		"aggregateVersion": "42", "tenantId": "t1", "projection": "p", "effect": "fx",
		"payload.reasonCode": "SLA", "payload.a.b.c": "deep",
	}
	lookup := func(name string) (string, bool) { v, ok := values[name]; return v, ok }
	good := map[string]string{
		"email:case:{aggregateId}:sla-breach:v{aggregateVersion}":    "email:case:CASE-1:sla-breach:v42",
		"{eventId}{eventType}{aggregateType}{tenantId}":              "e1TCaset1",
		"{projection}/{effect}/{payload.reasonCode}/{payload.a.b.c}": "p/fx/SLA/deep",
		"constant": "constant",
		"":         "",
	}
	for src, want := range good {
		tpl, err := effect.ParseTemplate(src)
		if err != nil {
			t.Errorf("ParseTemplate(%q): %v", src, err)
			continue
		}
		got, err := tpl.Expand(lookup)
		if err != nil || got != want {
			t.Errorf("Expand(%q) = %q, %v; want %q", src, got, err, want)
		}
		if tpl.String() != src {
			t.Errorf("String() = %q", tpl.String())
		}
	}
	tpl, _ := effect.ParseTemplate("a{eventId}b{payload.x}")
	if !slices.Equal(tpl.Placeholders(), []string{"eventId", "payload.x"}) {
		t.Errorf("Placeholders %q", tpl.Placeholders())
	}
	if _, err := tpl.Expand(lookup); !errors.Is(err, effect.ErrNoValue) || !strings.Contains(err.Error(), "{payload.x}") {
		t.Errorf("missing value: %v", err)
	}
	bad := map[string]string{
		"{}":              "empty placeholder",
		"{foo}":           "unknown placeholder {foo}",
		"{AggregateId}":   "unknown placeholder",
		"{ aggregateId }": "unknown placeholder",
		"{payload}":       "unknown placeholder",
		"{payload.}":      "empty path segment",
		"{payload.a..b}":  "empty path segment",
		"a{eventId":       "unbalanced '{' at offset 1",
		"a}b":             "unbalanced '}' at offset 1",
		"{{eventId}}":     "unbalanced '{' at offset 0",
		"{event{Id}":      "unbalanced '{'",
		"x:{eventId}}":    "unbalanced '}' at offset 11",
	}
	for src, msg := range bad {
		_, err := effect.ParseTemplate(src)
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseTemplate(%q) = %v, want error containing %q", src, err, msg)
		}
	}
}
