package sideeffects

import (
	"github.com/projector-dev/projector/internal/runtime/config"
	"github.com/projector-dev/projector/internal/runtime/eos"
	"github.com/projector-dev/projector/internal/runtime/state"
)

// The types a user of the package needs that are implemented in internal
// packages, re-exported here so that another module can configure effects
// and run a worker (in the style of pebble's internal.go). They are the
// configuration file's own types: internal/runtime/app passes the file's
// sideEffects to NewRules and EffectsFromConfig as they are.

// EffectRule is one configured side effect: the event types and optional
// condition that trigger it, its idempotency key template, its webhook and
// its retry policy (the sideEffects entries of the configuration file).
type EffectRule = config.SideEffect

// WebhookConfig is an effect's HTTP POST target (NewWebhook).
type WebhookConfig = config.Webhook

// Condition restricts an EffectRule to events whose field equals a value.
type Condition = config.Condition

// Duration is WebhookConfig.Timeout's type: a time.Duration, e.g.
// Duration(5 * time.Second).
type Duration = config.Duration

// The values of Effect.OnUnknown (and EffectRule.OnUnknown), and the
// defaults of an effect's attempts and of a webhook's timeout.
const (
	OnUnknownRetry        = config.OnUnknownRetry
	OnUnknownPark         = config.OnUnknownPark
	DefaultMaxAttempts    = config.DefaultMaxAttempts
	DefaultWebhookTimeout = config.DefaultWebhookTimeout
)

// StateStore is the worker's local state (WorkerConfig.Store): the Pebble
// database of the owned partitions' ledgers.
type StateStore = state.Store

// Hooks are WorkerConfig's test seams for fault injection; nil in
// production.
type Hooks = eos.Hooks

// LoopStats are the transaction loop's counters embedded in WorkerStats.
type LoopStats = eos.Stats

// Session is the part of WorkerConfig the executor shares with the
// processor (processor.Session is the same type): who the worker is in
// Kafka, its local store and the transaction loop's bounds.
type Session = eos.Session
