package state

import (
	"encoding/binary"
	"fmt"
	"sort"

	"github.com/cockroachdb/pebble/v2"
)

// Txn stages the writes of one Kafka transaction. It is owned by one goroutine.
// Writes to the same key collapse to the last one, so the changelog carries one
// record per key per transaction, not one per event.
type Txn struct {
	s       *Store
	writes  map[string]staged
	offsets map[Task]int64
	after   []func()
}

type staged struct {
	val []byte // nil: deleted
}

// NewTxn starts an empty staging overlay over the store.
func (s *Store) NewTxn() *Txn {
	return &Txn{s: s, writes: make(map[string]staged), offsets: make(map[Task]int64)}
}

// Get reads key, staged writes first (invariant 2). The returned slice must not
// be modified.
func (t *Txn) Get(key []byte) ([]byte, bool, error) {
	if w, ok := t.writes[string(key)]; ok {
		return w.val, w.val != nil, nil
	}
	return t.s.Get(key)
}

// Set stages key=val. The txn keeps val; the caller must not modify it after.
func (t *Txn) Set(key, val []byte) {
	if val == nil {
		val = []byte{}
	}
	t.writes[string(key)] = staged{val: val}
}

// Delete stages the deletion of key.
func (t *Txn) Delete(key []byte) { t.writes[string(key)] = staged{} }

// Len is the number of distinct keys staged.
func (t *Txn) Len() int { return len(t.writes) }

// Each calls fn for every staged write; val is nil for a deletion.
func (t *Txn) Each(fn func(key string, val []byte)) {
	for k, w := range t.writes {
		fn(k, w.val)
	}
}

// SetChangelogOffset records that, once this txn commits, the task's state
// reflects its changelog up to (not including) next.
func (t *Txn) SetChangelogOffset(task Task, next int64) {
	if cur, ok := t.offsets[task]; !ok || next > cur {
		t.offsets[task] = next
	}
}

// AfterCommit registers fn to run after a successful Commit, in order. In-memory
// indexes derived from state are updated here so that they, too, are never
// ahead of Kafka.
func (t *Txn) AfterCommit(fn func()) { t.after = append(t.after, fn) }

// Commit writes the staged state and changelog offsets to Pebble in one synced
// batch, then runs the after-commit hooks. Call it only after the Kafka
// transaction committed (invariant 1).
func (t *Txn) Commit() (err error) {
	if t.s.db == nil {
		return ErrClosed
	}
	defer t.s.contain(&err)
	b := t.s.db.NewBatch()
	defer b.Close()
	for k, w := range t.writes {
		var err error
		if w.val == nil {
			err = b.Delete([]byte(k), nil)
		} else {
			err = b.Set([]byte(k), w.val, nil)
		}
		if err != nil {
			return fmt.Errorf("state: commit: %w", err)
		}
	}
	for task, next := range t.offsets {
		if err := b.Set(offsetKey(task), binary.BigEndian.AppendUint64(nil, uint64(next)), nil); err != nil {
			return fmt.Errorf("state: commit: %w", err)
		}
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.s.cache.clear() // unknown what landed
		return fmt.Errorf("state: commit: %w", err)
	}
	for k, w := range t.writes {
		// Only refresh what reads brought in: write-once keys (dedup
		// marks) would otherwise evict the hot aggregates.
		t.s.cache.refresh(k, w.val)
	}
	for _, fn := range t.after {
		fn()
	}
	t.writes, t.offsets, t.after = nil, nil, nil
	return nil
}

// Scan calls fn, in key order, for every key with prefix as this txn sees it:
// Pebble overlaid with the staged writes. It is meant for rare, bounded work
// (draining or expiring one aggregate's held events), not the per-event path.
func (t *Txn) Scan(prefix []byte, fn func(key, value []byte) error) error {
	return t.ScanFrom(prefix, prefix, fn)
}

// ScanFrom is Scan restricted to keys ≥ from (a cursor within the prefix).
func (t *Txn) ScanFrom(prefix, from []byte, fn func(key, value []byte) error) error {
	var staged []string
	for k := range t.writes {
		if len(k) >= len(prefix) && k[:len(prefix)] == string(prefix) && k >= string(from) {
			staged = append(staged, k)
		}
	}
	sort.Strings(staged)
	emitStaged := func(upTo string, inclusive bool) error {
		for len(staged) > 0 && (staged[0] < upTo || (inclusive && staged[0] == upTo) || upTo == "") {
			k := staged[0]
			staged = staged[1:]
			if v := t.writes[k].val; v != nil {
				if err := fn([]byte(k), v); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err := t.s.scanFrom(prefix, from, func(key, value []byte) error {
		if err := emitStaged(string(key), false); err != nil {
			return err
		}
		if _, ok := t.writes[string(key)]; ok {
			return nil // the staged write (or deletion) wins
		}
		return fn(key, value)
	})
	if err != nil {
		return err
	}
	return emitStaged("", true)
}
