package dedup

import "time"

// Add records a committed mark, as AddStaged does for a transaction's: for
// tests and benchmarks that fill the cache directly.
func (r *Recent) Add(id ID, fp [32]byte, at time.Time) {
	if r != nil {
		r.add(id, fp[:], at.UnixMilli())
	}
}

// RecentVerdict is the recent-cache step of Check.
func (s *Store) RecentVerdict(r *Recent, id ID, fp [32]byte, now time.Time) (Verdict, bool) {
	return s.recentVerdict(r, id, fp, now)
}

// PartitionOver returns a partition of s under prefix with filter f and
// recent-id cache r (nil: none, so that Check reads the store) and a sweeper
// whose first pass starts at once: for tests and benchmarks that drive the
// store through one piece at a time.
func (s *Store) PartitionOver(prefix []byte, f *Filter, r *Recent) *Partition {
	return &Partition{store: s, prefix: prefix, filter: f, recent: r, sweep: &sweeper{}}
}

// PartitionRead returns a partition of s under prefix that knows the
// task's entries as scan reads them (their epochs), with no filter and no
// cache of recent ids, so that Check reads the store, and a sweeper whose
// first pass starts at once: for tests that check what a store holds.
func (s *Store) PartitionRead(scan ScanFunc, prefix []byte) (*Partition, error) {
	p := s.PartitionOver(prefix, nil, nil)
	sc, err := scanEntries(scan, prefix)
	if err != nil {
		return nil, err
	}
	p.epochs, p.legacy = sc.epochs, sc.legacy
	return p, nil
}

// Epochs is the partition's list of epochs (their ends, unix ms).
func (p *Partition) Epochs() []int64 { return p.epochs }

// Legacy reports whether Check asks for entries of the earlier layouts.
func (p *Partition) Legacy() bool { return p.legacy }
