package processor

import (
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/state"
)

// The types a user of the package needs that are implemented in internal
// packages, re-exported here so that another module can build a processor
// (in the style of pebble's internal.go).

// Store is the processor's local state: one Pebble database holding every
// partition's aggregates, held events and dedup marks. Open it with
// OpenStore and close it after Run returns.
type Store = state.Store

// StoreConfig are the options of a Store (StoreOptions gives a processor's).
type StoreConfig = state.Options

// LoopStats are the transaction loop's counters embedded in Stats.
type LoopStats = eos.Stats

// OpenStore opens (or creates) the processor's store in dir, with a block
// cache of cacheBytes (0: the store's default).
func OpenStore(dir string, cacheBytes int64) (*Store, error) {
	return state.Open(dir, StoreOptions(cacheBytes))
}

// Session is the part of Config the processor shares with the side-effect
// executor (sideeffects.Session is the same type): who the worker is in
// Kafka, its local store and the transaction loop's bounds.
type Session = eos.Session
