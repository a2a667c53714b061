package dedup

import (
	"encoding/binary"
	"errors"
	"time"
)

// sweeper is where a partition's expiry pass stands: it deletes expired
// entries of one task, a bounded chunk at a time. Its zero value starts a
// pass at once; newSweeper waits a period first.
type sweeper struct {
	next   time.Time // when the next pass may start
	cursor []byte    // where the current pass's entries continue; nil: no pass running
	// segments is where the pass's segment phase continues (nil: done), so
	// that no chunk walks again over the markers an earlier chunk deleted.
	segments []byte
	// kept counts the entries of the earlier layouts the pass has left so
	// far (live, or unreadable: Check reports those): none at the pass's
	// end, and Check need not ask for one any more.
	kept int
}

// due reports whether a sweep has work at now: a pass under way, or the next
// one due.
func (sw *sweeper) due(now time.Time) bool { return sw.cursor != nil || !now.Before(sw.next) }

// SweepDue reports whether Sweep has work at now: a pass under way, or the
// next one due. (The caller can skip staging anything for the sweep
// otherwise.)
func (p *Partition) SweepDue(now time.Time) bool { return p.sweep.due(now) }

// LocalKV is what a local expiry (SweepLocal) needs: a scan and local
// deletions, of a key or of a range of keys, nothing that reaches the
// changelog. DeleteLocal and DeleteRangeLocal keep their keys.
type LocalKV interface {
	ScanFrom(prefix, from []byte, fn func(key, value []byte) error) error
	DeleteLocal(key []byte)
	DeleteRangeLocal(start, end []byte)
}

// SweepKV is what a sweep needs: a scan that sees the staged overlay,
// deletions that become changelog tombstones, and local ones.
type SweepKV interface {
	LocalKV
	Delete(key []byte)
}

// errChunk stops a scan at the chunk boundary.
var errChunk = errors.New("dedup: chunk done")

// Sweep runs one chunk of the expiry pass over the task's entries when one is
// due (a pass starts every retention/8 and continues chunk by chunk). A pass
// first tombstones the expired segments, then deletes the expired entries of
// the earlier layouts, then the epochs whose entries have all expired, one
// range deletion each. It examines at most examine keys (the epochs, a
// seek each, are not counted: there are one or two per pass), deletes the
// expired ones through kv and returns how many deletions it staged.
func (p *Partition) Sweep(kv SweepKV, now time.Time, examine int) (int, error) {
	s, sw, taskPrefix := p.store, p.sweep, p.prefix
	if !sw.due(now) {
		return 0, nil
	}
	if sw.cursor == nil {
		sw.cursor = Prefix(taskPrefix)
		sw.segments = segmentPrefix(taskPrefix)
		sw.kept = 0
	}
	deleted := 0
	if sw.segments != nil {
		n, err := s.sweepSegments(sw, kv, taskPrefix, now, examine)
		if err != nil || sw.segments != nil {
			return n, err
		}
		deleted = n
	}
	// The segments tombstoned count against the chunk.
	next, n, kept, err := s.sweepEntries(kv, taskPrefix, sw.cursor, now, examine-deleted, kv.Delete)
	deleted += n
	if err != nil {
		return deleted, err
	}
	sw.cursor, sw.kept = next, sw.kept+kept
	if next == nil {
		// Whatever is left of the earlier layouts has expired (whether
		// this pass's deletions commit or not): a check can skip it.
		p.legacy = p.legacy && sw.kept > 0
		staged, err := s.sweepEpochs(kv, taskPrefix, now)
		deleted += len(staged)
		if err != nil {
			return deleted, err
		}
		p.forgetEpochs(now, staged)
		sw.next = now.Add(s.SweepPeriod())
	}
	return deleted, nil
}

// SweepLocal is the expiry of a store whose task another instance owns – a
// standby replica's (docs/decisions/017), which never runs Sweep: it
// examines at most examine of the task's entries from from (nil: the
// first) and deletes the expired ones that a segment restored. The owner's
// sweep tombstones their segment, and a segment's tombstone does not name
// its entries (Restore), so nobody else deletes them here. It leaves the
// entries of the pre-segment layout, whose own tombstones the owner
// produces, and never touches a segment marker: only the owner may
// tombstone one, and a standby that dropped a marker and then took the task
// over would never tombstone that segment in the changelog.
// The epochs whose entries have all expired go last, a range deletion each.
// It returns where the pass continues (nil: it is done) and how many
// deletions it made.
func (s *Store) SweepLocal(kv LocalKV, taskPrefix, from []byte, now time.Time, examine int) (next []byte, deleted int, err error) {
	if from == nil {
		from = Prefix(taskPrefix)
	}
	next, deleted, _, err = s.sweepEntries(kv, taskPrefix, from, now, examine, nil)
	if err != nil || next != nil {
		return next, deleted, err
	}
	staged, err := s.sweepEpochs(kv, taskPrefix, now)
	return nil, deleted + len(staged), err
}

// sweepEpochs deletes, with one local range deletion each, the task's
// epochs whose entries have all expired by now (an epoch ends before its
// last mark's time is out of the retention), oldest first: a seek per
// epoch, stopping at the first that may hold a live entry. It returns the
// ends of the epochs it deleted. A range deleted in a transaction that
// aborted is found again by the next pass.
func (s *Store) sweepEpochs(kv LocalKV, taskPrefix []byte, now time.Time) (staged []int64, err error) {
	prefix := EpochPrefix(taskPrefix)
	from := prefix
	for {
		var end int64
		found := false
		err := kv.ScanFrom(prefix, from, func(k, _ []byte) error {
			// Not an entry (nothing else writes here): skip it.
			if end, _, found = parseEpochKey(k, taskPrefix); found {
				return errChunk
			}
			return nil
		})
		if err != nil && !errors.Is(err, errChunk) {
			return staged, err
		}
		if !found || s.liveAt(end-1, now) {
			return staged, nil // epochs are in time order: the rest are live
		}
		// [the epoch's first key, the next epoch's): exactly its entries.
		from = appendEpochStart(nil, taskPrefix, end+1)
		kv.DeleteRangeLocal(appendEpochStart(nil, taskPrefix, end), from)
		staged = append(staged, end)
	}
}

// sweepEntries examines at most examine of the task's entries of the
// earlier layouts from from and deletes the expired ones: a segment's
// locally (its segment's tombstone covers it), one of the pre-segment
// layout, which has its own changelog record, through logged (nil: it
// stays). It returns the key the pass continues at (nil once it reached the
// end), the deletions, and the entries it kept that are live or unreadable.
func (s *Store) sweepEntries(kv LocalKV, taskPrefix, from []byte, now time.Time, examine int, logged func(key []byte)) (next []byte, deleted, kept int, err error) {
	seen := 0
	var last []byte
	err = kv.ScanFrom(Prefix(taskPrefix), from, func(k, v []byte) error {
		if seen >= examine {
			last = append(last[:0], k...)
			return errChunk
		}
		seen++
		if !validEntry(v) || s.live(v, now) {
			kept++
			return nil
		}
		switch {
		case len(v) != entryLen:
			kv.DeleteLocal(append([]byte(nil), k...))
		case logged != nil:
			logged(append([]byte(nil), k...))
		default:
			return nil
		}
		deleted++
		return nil
	})
	switch {
	case errors.Is(err, errChunk):
		return last, deleted, kept, nil
	case err != nil:
		return nil, deleted, kept, err
	}
	return nil, deleted, kept, nil
}

// sweepSegments tombstones up to examine expired segments, oldest first,
// from the pass's segment cursor; it clears the cursor once it reached the
// first live segment (or the end).
func (s *Store) sweepSegments(sw *sweeper, kv SweepKV, taskPrefix []byte, now time.Time, examine int) (int, error) {
	prefix := segmentPrefix(taskPrefix)
	deleted := 0
	var next []byte // nil: the segment phase is done
	err := kv.ScanFrom(prefix, sw.segments, func(k, _ []byte) error {
		if len(k) != len(taskPrefix)+segmentKeyLen {
			return nil // not ours to judge; Restore would have refused it
		}
		if s.liveAt(int64(binary.BigEndian.Uint64(k[len(prefix):])), now) {
			return errChunk // markers are in time order: the rest are live
		}
		if deleted >= examine {
			next = append([]byte(nil), k...)
			return errChunk
		}
		kv.Delete(append([]byte(nil), k...))
		deleted++
		return nil
	})
	if err != nil && !errors.Is(err, errChunk) {
		return deleted, err
	}
	sw.segments = next
	return deleted, nil
}

// SweepPeriod is how often an expiry pass over a task's entries starts
// (retention/8): Sweep's, and the standby's SweepLocal passes.
func (s *Store) SweepPeriod() time.Duration { return s.retention / 8 }

// newSweeper returns a sweeper whose first pass starts one period after now,
// so that a restart does not begin with a full scan.
func (s *Store) newSweeper(now time.Time) *sweeper { return &sweeper{next: now.Add(s.SweepPeriod())} }
