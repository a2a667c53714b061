package dedup

import "time"

// ScanFunc reads every stored key under prefix, in order (state.Store.Scan,
// state.Txn.Scan).
type ScanFunc = func(prefix []byte, fn func(k, v []byte) error) error

// Partition is dedup's in-memory state of one task (one input partition):
// the filter of the ids marked in it, the front cache of its recent
// committed marks and its expiry sweeper. It lives as long as the task is
// owned and survives a re-restore (Restored). Its task's records are
// processed by one goroutine at a time, so it has no lock.
type Partition struct {
	store  *Store
	prefix []byte
	filter *Filter  // ids marked in this task (superset: may include aborted marks)
	recent *Recent  // committed marks, most recent (Committed adds)
	sweep  *Sweeper // the expiry pass over the task's entries
}

// NewPartition returns the dedup state of the task under prefix: its filter
// built from what scan reads, a front cache of recentIDs committed ids, and
// a sweeper whose first pass starts one period after now.
func (s *Store) NewPartition(scan ScanFunc, prefix []byte, recentIDs int, now time.Time) (*Partition, error) {
	f, err := BuildFilter(scan, prefix)
	if err != nil {
		return nil, err
	}
	return &Partition{store: s, prefix: prefix, filter: f, recent: NewRecent(recentIDs), sweep: s.NewSweeper(now)}, nil
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
// whether with the same fingerprint (Store.Check with the partition's filter
// and cache).
func (p *Partition) Check(kv KV, id ID, fp [32]byte, now time.Time) (Verdict, error) {
	return p.store.Check(kv, p.filter, p.recent, p.prefix, id, fp, now)
}

// Mark records id with its fingerprint at now in kv and the filter; m
// collects the mark into the transaction's changelog segment (Store.Mark).
func (p *Partition) Mark(kv KV, m *Marks, offset int64, id ID, fp [32]byte, now time.Time) {
	p.store.Mark(kv, p.filter, m, p.prefix, offset, id, fp, now)
}

// Stage writes the segment m holds, if any, into kv (Store.Stage).
func (p *Partition) Stage(kv KV, m *Marks) { p.store.Stage(kv, m, p.prefix) }

// Committed takes the staged marks of a committed transaction into the
// cache of recent ids.
func (p *Partition) Committed(m *Marks) { p.recent.AddStaged(m) }

// FilterFull reports that the filter holds more ids than it was sized for:
// RebuildFilter should rebuild it before the next transaction marks more.
func (p *Partition) FilterFull() bool { return p.filter.Full() }

// RebuildFilter rebuilds the filter, larger, from what scan reads.
func (p *Partition) RebuildFilter(scan ScanFunc) error {
	f, err := BuildFilter(scan, p.prefix)
	if err != nil {
		return err
	}
	p.filter = f
	return nil
}

// SweepDue reports whether Sweep has work at now.
func (p *Partition) SweepDue(now time.Time) bool { return p.sweep.Due(now) }

// Sweep runs one chunk of the expiry pass through kv (Store.Sweep) and
// returns how many entries it deleted.
func (p *Partition) Sweep(kv SweepKV, now time.Time, examine int) (int, error) {
	return p.store.Sweep(p.sweep, kv, p.prefix, now, examine)
}
