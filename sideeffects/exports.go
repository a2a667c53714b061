package sideeffects

import (
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/state"
)

// The types a user of the package needs that are implemented in internal
// packages, re-exported here so that another module can run a worker (in
// the style of pebble's internal.go). The side-effect domain's types
// (effect.Rule, effect.Condition, webhook.Config) are plain Go declared by
// the packages that own them.

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
