package processor

import (
	"fmt"
	"time"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/core/state"
)

// standbyTidy is the processor's eos.Config.StandbyTidy: the dedup expiry of
// the tasks this instance keeps as a standby replica (docs/decisions/017).
// The owner's sweep deletes a segment's entries locally and tombstones its
// marker; the standby restores only that tombstone, so without this its
// store would keep every tombstoned segment's entries until it took the
// task over. Per task a pass starts at most every dedup.Store.SweepPeriod,
// and each call does one chunk of it (dedup.Store.SweepLocal): the standby
// calls after each read of the task, and a takeover waits for the read and
// what follows it, so a call stays short. The first pass of a task starts
// at its first call: a restarting instance does not put it off again.
//
// Goroutines: the standby's only. eos calls it from the standby goroutine,
// never concurrently with itself and never for a task the loop owns at that
// moment (docs/design.md#one-writer-per-task), so passes has no lock.
type standbyTidy struct {
	store  *state.Store
	dedup  *dedup.Store
	chunk  int                      // entries a call examines
	passes map[state.Task]*tidyPass // one per task ever seen (a few bytes each)
}

// tidyPass is where the expiry of one standby task stands.
type tidyPass struct {
	next   time.Time // when the next pass may start
	cursor []byte    // where the pass under way continues; nil: none
}

func newStandbyTidy(st *state.Store, d *dedup.Store) *standbyTidy {
	return &standbyTidy{store: st, dedup: d, chunk: sweepChunk, passes: make(map[state.Task]*tidyPass)}
}

// tidy runs one chunk of task t's pass when one is under way or due at now.
//
// The deletions go to Pebble through state.Store.Restore, with the task's
// changelog offset as it stands, not through a state.Txn: a Txn's commit
// belongs to the loop's commit goroutine (state.Store's flush bookkeeping
// without a WAL, the processor's default, is that goroutine's alone), while
// Restore is what the standby already writes with. Restore stamps the
// position's match time anew; the call follows a read that reached the
// changelog's end, as that read's own stamp says.
func (s *standbyTidy) tidy(t state.Task, now time.Time) error {
	ps := s.passes[t]
	if ps == nil {
		ps = &tidyPass{}
		s.passes[t] = ps
	}
	if ps.cursor == nil && now.Before(ps.next) {
		return nil
	}
	next, _, ok, err := s.store.ChangelogPosition(t)
	if err != nil {
		return fmt.Errorf("processor: standby tidy %s: %w", t, err)
	}
	if !ok {
		return nil // nothing restored here yet (and no position to invent)
	}
	prefix := t.Prefix()
	kv := &localDeletes{scan: s.store.NewTxn(), skip: len(prefix)}
	cursor, n, err := s.dedup.SweepLocal(kv, prefix, ps.cursor, now, s.chunk)
	if err != nil {
		return fmt.Errorf("processor: standby tidy %s: %w", t, err)
	}
	if n > 0 {
		if err := s.store.Restore(t, kv.recs, next); err != nil {
			return fmt.Errorf("processor: standby tidy %s: %w", t, err)
		}
	}
	ps.cursor = cursor
	if cursor == nil {
		ps.next = now.Add(s.dedup.SweepPeriod())
	}
	return nil
}

// localDeletes is the dedup.LocalKV of a tidy chunk: it scans the store
// (through an empty Txn, which reads Pebble as it stands) and collects the
// deletions, of keys and of ranges, for state.Store.Restore, keys below the
// task prefix (skip bytes).
type localDeletes struct {
	scan *state.Txn
	skip int
	recs []state.Record
}

func (l *localDeletes) ScanFrom(prefix, from []byte, fn func(key, value []byte) error) error {
	return l.scan.ScanFrom(prefix, from, fn)
}

// DeleteLocal keeps key (a copy SweepLocal made) for the chunk's batch.
func (l *localDeletes) DeleteLocal(key []byte) {
	l.recs = append(l.recs, state.Record{Key: key[l.skip:]})
}

// DeleteRangeLocal keeps the range (copies SweepLocal made) for the chunk's
// batch.
func (l *localDeletes) DeleteRangeLocal(start, end []byte) {
	l.recs = append(l.recs, state.Record{Key: start[l.skip:], End: end[l.skip:]})
}
