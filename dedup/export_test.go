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
