// Package seam carries what only this repository's own code puts into the
// public packages' configurations: the test seams (the transaction loop's
// fault-injection hooks, the clock) and a state store the caller opened
// itself (the application opens its stores to read their Pebble metrics;
// tests open them with options of their own). None of it is part of the
// public API (docs/decisions/015-public-api.md): processor.Config and
// sideeffects.WorkerConfig keep it in an unexported field, which only the
// setters below reach.
//
// The setters are function variables that packages processor and
// sideeffects fill in their init, because this package sits below them
// (internal/core: TestLayering) and cannot name their types. A setter
// given anything but a pointer to its package's configuration panics: it
// is called only by the wiring and by tests, with a literal of the right
// type.
package seam

import (
	"time"

	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/state"
)

// Seams are the settings a public configuration takes from inside the
// repository only. The zero value changes nothing.
type Seams struct {
	// Hooks stop the transaction loop at precise points (fault tests).
	Hooks *eos.Hooks
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Store, when set, is the state store to run on, opened and closed by
	// the caller; the configuration's own Store and StateDir are then
	// ignored.
	Store *state.Store
}

var (
	// Processor puts s into cfg, a *processor.Config (set by package
	// processor).
	Processor func(cfg any, s Seams)
	// Executor puts s into cfg, a *sideeffects.WorkerConfig (set by
	// package sideeffects).
	Executor func(cfg any, s Seams)
	// ProcessorStoreOptions are the options a processor's store is opened
	// with, with a block cache of cacheBytes (0: the store's default); set
	// by package processor, for the callers that open the store
	// themselves.
	ProcessorStoreOptions func(cacheBytes int64) state.Options
)
