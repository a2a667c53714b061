package dedup

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"time"
)

// ScanFunc reads every stored key under prefix, in order (state.Store.Scan,
// state.Txn.Scan).
type ScanFunc = func(prefix []byte, fn func(k, v []byte) error) error

// Partition is dedup's in-memory state of one task (one input partition)
// and the only entry point for the task's dedup work (Check, Mark, Stage,
// Sweep): the filter of the ids marked in it, the front cache of its recent
// committed marks and its expiry sweeper. It lives as long as the task is
// owned and survives a re-restore (Restored). Its task's records are
// processed by one goroutine at a time, so it has no lock. (A nil filter or
// cache, which only tests make, answers nothing: Check reads kv.)
type Partition struct {
	store  *Store
	prefix []byte
	filter *Filter  // ids marked in this task (superset: may include aborted marks)
	recent *Recent  // committed marks, most recent (Committed adds)
	sweep  *sweeper // the expiry pass over the task's entries
	// epochs are the ends of the epochs that may hold the task's entries,
	// ascending: those the last scan found and those Mark wrote to since
	// (superset: an aborted mark's epoch may be empty), until a sweep pass
	// finds one gone. Check asks each that may still hold a live entry.
	epochs []int64
	// legacy is set when the last scan found entries of the earlier
	// layouts (kind 'd'): Check asks for one too.
	legacy bool
}

// NewPartition returns the dedup state of the task under prefix: its filter
// built from what scan reads, a front cache of recentIDs committed ids, and
// a sweeper whose first pass starts one period after now.
func (s *Store) NewPartition(scan ScanFunc, prefix []byte, recentIDs int, now time.Time) (*Partition, error) {
	p := &Partition{store: s, prefix: prefix, recent: NewRecent(recentIDs), sweep: s.newSweeper(now)}
	if err := p.RebuildFilter(scan); err != nil {
		return nil, err
	}
	return p, nil
}

// Restored updates p after its task's state was restored again: when the
// restore changed the store (changed), the filter is rebuilt from scan and
// the cache of recent ids starts empty (recentIDs large); otherwise both
// stand. The sweeper keeps its pass either way. On error p is unchanged.
func (p *Partition) Restored(scan ScanFunc, changed bool, recentIDs int) error {
	if !changed {
		return nil
	}
	if err := p.RebuildFilter(scan); err != nil {
		return err
	}
	p.recent = NewRecent(recentIDs)
	return nil
}

// Check reports whether id was seen within the retention window, and if so
// whether with the same fingerprint. The filter answers most misses without
// reading kv, the cache of recent ids most recent duplicates.
func (p *Partition) Check(kv KV, id ID, fp [32]byte, now time.Time) (Verdict, error) {
	if p.filter != nil && !p.filter.MayContain(id) {
		return New, nil
	}
	s := p.store
	if v, known := s.recentVerdict(p.recent, id, fp, now); known {
		return v, nil
	}
	kb := keyBufs.Get().(*[]byte)
	v, ok, err := p.lookup(kv, kb, id, now)
	keyBufs.Put(kb)
	if err != nil {
		return New, fmt.Errorf("dedup: check: %w", err)
	}
	if !ok {
		return New, nil
	}
	if !validEntry(v) {
		return New, ErrCorrupt
	}
	if !s.live(v, now) {
		return New, nil // expired, not yet swept
	}
	if bytes.Equal(v[:32], fp[:]) {
		return Duplicate, nil
	}
	return Conflict, nil
}

// lookup reads id's entry from kv: in each epoch that may hold a live one,
// newest first (a redelivery is most often of a recent event), then, if the
// task has any, among the entries of the earlier layouts. kb is the key's
// buffer.
func (p *Partition) lookup(kv KV, kb *[]byte, id ID, now time.Time) ([]byte, bool, error) {
	for i := len(p.epochs) - 1; i >= 0; i-- {
		end := p.epochs[i]
		if !p.store.liveAt(end-1, now) {
			break // this epoch's entries have all expired, and the older ones'
		}
		key := appendEpochKey((*kb)[:0], p.prefix, end, id)
		v, ok, err := kv.Get(key)
		*kb = key[:0]
		if ok || err != nil {
			return v, ok, err
		}
	}
	if !p.legacy {
		return nil, false, nil
	}
	key := appendKey((*kb)[:0], p.prefix, id)
	v, ok, err := kv.Get(key)
	*kb = key[:0]
	return v, ok, err
}

// addEpoch lists the epoch ending at end. Only a sweep pass drops an epoch
// from the list (forgetEpochs), once it found the epoch gone from the
// store: a clock that steps back then still finds what was not deleted, as
// it did with the id-keyed layout.
func (p *Partition) addEpoch(end int64) {
	n := len(p.epochs)
	if n > 0 && p.epochs[n-1] == end {
		return // the common case: the newest epoch
	}
	if i, found := slices.BinarySearch(p.epochs, end); !found {
		p.epochs = slices.Insert(p.epochs, i, end)
	}
}

// forgetEpochs drops from the list the epochs expired at now that a sweep
// pass did not find in the store (their range deletion landed, or they never
// held a committed entry); staged are those it found and is deleting now,
// which stay until a later pass no longer finds them (the deletion may
// abort).
func (p *Partition) forgetEpochs(now time.Time, staged []int64) {
	p.epochs = slices.DeleteFunc(p.epochs, func(end int64) bool {
		return !p.store.liveAt(end-1, now) && !slices.Contains(staged, end)
	})
}

// Mark records id with its fingerprint at now in kv and the filter: an
// entry in Pebble under now's epoch, and an item of the segment m builds
// for the changelog (the transaction's marks of the task). offset is the
// input record's offset.
func (p *Partition) Mark(kv KV, m *Marks, offset int64, id ID, fp [32]byte, now time.Time) {
	if p.filter != nil {
		p.filter.Add(id)
	}
	at := now.UnixMilli()
	end := p.store.epochEnd(at)
	p.addEpoch(end)
	if m.n > 0 && (m.at != at || m.n == segmentMax) {
		p.Stage(kv, m)
	}
	if m.n == 0 {
		m.first, m.at = offset, at
		m.buf = append(make([]byte, 0, 4096), segmentVersion)
	}
	m.buf = append(append(m.buf, id[:]...), fp[:]...)
	m.n++
	// One allocation for both: KV.SetLocal keeps the key and the value.
	n := len(p.prefix) + epochEntryLen
	buf := make([]byte, n+segmentEntryLen)
	k := appendEpochKey(buf[:0:n], p.prefix, end, id)
	putEntry(buf[n:], fp[:], at)
	kv.SetLocal(k, buf[n:])
}

// Stage writes the segment m holds, if any, into kv (its changelog record and
// Pebble marker) and empties m. Call it before the transaction's changelog
// records are produced; Mark calls it when a segment is full.
func (p *Partition) Stage(kv KV, m *Marks) {
	if m.n == 0 {
		return
	}
	key := binary.BigEndian.AppendUint64(segmentPrefix(p.prefix), uint64(m.at))
	key = binary.BigEndian.AppendUint64(key, uint64(m.first))
	kv.SetLogged(key, binary.BigEndian.AppendUint32(nil, uint32(m.n)), m.buf)
	*m = Marks{staged: append(m.staged, segment{m.at, m.buf})}
}

// Committed takes the staged marks of a committed transaction into the
// cache of recent ids.
func (p *Partition) Committed(m *Marks) { p.recent.AddStaged(m) }

// FilterFull reports that the filter holds more ids than it was sized for:
// RebuildFilter should rebuild it before the next transaction marks more.
func (p *Partition) FilterFull() bool { return p.filter.Full() }

// RebuildFilter rebuilds the filter, larger, and the list of epochs from
// what scan reads. On error p is unchanged.
func (p *Partition) RebuildFilter(scan ScanFunc) error {
	sc, err := scanEntries(scan, p.prefix)
	if err != nil {
		return err
	}
	p.filter, p.epochs, p.legacy = sc.filter(), sc.epochs, sc.legacy
	if sc.legacy && p.sweep != nil {
		// A pass under way may have gone past entries of the earlier
		// layout this scan found (a restore brought them in): they count
		// as kept, so the pass does not conclude there are none.
		p.sweep.kept++
	}
	return nil
}
