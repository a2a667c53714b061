package state

import "github.com/cockroachdb/pebble/v2"

// OpenTuned is Open with tune applied to Pebble's options last.
func OpenTuned(dir string, o Options, tune func(*pebble.Options)) (*Store, error) {
	return openTuned(dir, o, tune)
}

// Flush flushes the store's memtable (benchmarks that start from a settled
// store).
func Flush(s *Store) error { return s.db.Flush() }
