package state

import (
	"context"

	"github.com/cockroachdb/pebble/v2"
)

// OpenTuned is Open with tune applied to Pebble's options last.
func OpenTuned(dir string, o Options, tune func(*pebble.Options)) (*Store, error) {
	return openTuned(dir, o, tune)
}

// Flush flushes the store's memtable (benchmarks that start from a settled
// store).
func Flush(s *Store) error { return s.db.Flush() }

// CompactAll flushes the store and compacts every key (all begin below
// 0xff) into the bottom level, waiting until done.
func CompactAll(s *Store) error {
	return s.db.Compact(context.Background(), []byte{}, []byte{0xff}, true)
}
