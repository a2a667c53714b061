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
}

// due reports whether a sweep has work at now: a pass under way, or the next
// one due.
func (sw *sweeper) due(now time.Time) bool { return sw.cursor != nil || !now.Before(sw.next) }

// SweepDue reports whether Sweep has work at now: a pass under way, or the
// next one due. (The caller can skip staging anything for the sweep
// otherwise.)
func (p *Partition) SweepDue(now time.Time) bool { return p.sweep.due(now) }

// SweepKV is what a sweep needs: a scan that sees the staged overlay,
// deletions that become changelog tombstones, and local ones.
type SweepKV interface {
	ScanFrom(prefix, from []byte, fn func(key, value []byte) error) error
	Delete(key []byte)
	DeleteLocal(key []byte)
}

// errChunk stops a scan at the chunk boundary.
var errChunk = errors.New("dedup: chunk done")

// Sweep runs one chunk of the expiry pass over the task's entries when one is
// due (a pass starts every retention/8 and continues chunk by chunk). A pass
// first tombstones the expired segments, then deletes the expired entries.
// It examines at most examine keys, deletes the expired ones through kv and
// returns how many it deleted.
func (p *Partition) Sweep(kv SweepKV, now time.Time, examine int) (int, error) {
	s, sw, taskPrefix := p.store, p.sweep, p.prefix
	if !sw.due(now) {
		return 0, nil
	}
	if sw.cursor == nil {
		sw.cursor = Prefix(taskPrefix)
		sw.segments = segmentPrefix(taskPrefix)
	}
	deleted := 0
	if sw.segments != nil {
		n, err := s.sweepSegments(sw, kv, taskPrefix, now, examine)
		if err != nil || sw.segments != nil {
			return n, err
		}
		deleted = n
	}
	prefix := Prefix(taskPrefix)
	seen := deleted // the segments tombstoned count against the chunk
	var last []byte
	err := kv.ScanFrom(prefix, sw.cursor, func(k, v []byte) error {
		if seen >= examine {
			last = append(last[:0], k...)
			return errChunk
		}
		seen++
		if !validEntry(v) || s.live(v, now) {
			return nil
		}
		if len(v) == entryLen {
			kv.Delete(append([]byte(nil), k...)) // it has its own changelog record
		} else {
			kv.DeleteLocal(append([]byte(nil), k...)) // its segment's tombstone covers it
		}
		deleted++
		return nil
	})
	switch {
	case errors.Is(err, errChunk):
		sw.cursor = last
	case err != nil:
		return deleted, err
	default:
		sw.cursor = nil
		sw.next = now.Add(s.retention / 8)
	}
	return deleted, nil
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

// newSweeper returns a sweeper whose first pass starts one period (retention/8)
// after now, so that a restart does not begin with a full scan.
func (s *Store) newSweeper(now time.Time) *sweeper { return &sweeper{next: now.Add(s.retention / 8)} }
