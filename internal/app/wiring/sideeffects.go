package wiring

import (
	"slices"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/sideeffects"
	"github.com/projector-dev/projector/sideeffects/effect"
	"github.com/projector-dev/projector/sideeffects/webhook"
)

// SideEffect is one sideEffects entry of the configuration in the library's
// own types: the rule the processor derives the effect's intents by, and
// how the executor calls it.
type SideEffect struct {
	Rule    effect.Rule
	Webhook webhook.Config
	// MaxAttempts and OnUnknown are the executor's retry policy
	// (sideeffects.Effect).
	MaxAttempts int
	OnUnknown   string
}

// SideEffects converts the configuration's sideEffects to the library's
// types. It is the one place where the YAML mirror (config.SideEffect,
// config.Condition, config.Webhook, config.Duration) becomes effect.Rule and
// webhook.Config: the library's packages know nothing of the configuration
// file (docs/design.md#file-map). The defaults are the library's own, so a
// configuration without ApplyDefaults converts to zero values that mean the
// same. The result shares no slice with ses.
func SideEffects(ses []config.SideEffect) []SideEffect {
	out := make([]SideEffect, 0, len(ses))
	for _, s := range ses {
		se := SideEffect{
			Rule: effect.Rule{Name: s.Name, On: slices.Clone(s.On), Key: s.Key},
			Webhook: webhook.Config{
				URL:           s.Webhook.URL,
				Timeout:       s.Webhook.Timeout.Std(),
				SigningSecret: slices.Clone(s.Webhook.SigningSecret),
			},
			MaxAttempts: s.MaxAttempts,
			OnUnknown:   s.OnUnknown,
		}
		if w := s.When; w != nil {
			se.Rule.When = &effect.Condition{Field: w.Field, Equals: w.Equals}
		}
		out = append(out, se)
	}
	return out
}

// EffectRules compiles the configuration's side-effect rules for the
// processor: nil without sideEffects. The error, for a configuration that
// did not pass config.Validate, is a *config.Error naming sideEffects.
func EffectRules(cfg *config.Config) (*effect.Rules, error) {
	if len(cfg.SideEffects) == 0 {
		return nil, nil
	}
	ses := SideEffects(cfg.SideEffects)
	rules := make([]effect.Rule, len(ses))
	for i := range ses {
		rules[i] = ses[i].Rule
	}
	r, err := effect.NewRules(rules)
	if err != nil {
		return nil, &config.Error{Key: "sideEffects", Msg: err.Error()}
	}
	return r, nil
}

// effects are the executor's effects of the configuration, by name: each
// called through its webhook (webhook.Client), whose timeout bounds a call.
func effects(ses []SideEffect) map[string]sideeffects.Effect {
	m := make(map[string]sideeffects.Effect, len(ses))
	for _, s := range ses {
		m[s.Rule.Name] = sideeffects.Effect{Caller: webhook.New(s.Webhook),
			MaxAttempts: s.MaxAttempts, OnUnknown: s.OnUnknown, Timeout: s.Webhook.Timeout}
	}
	return m
}
