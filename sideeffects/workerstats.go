package sideeffects

import (
	"sync"
)

// WorkerStats counts what the worker committed.
type WorkerStats struct {
	*LoopStats
	mu      sync.Mutex
	byES    map[[2]string]int64 // (effect, status)
	runners map[*Runner]bool
}

// Pending is the side-effect backlog of the owned partitions: keys waiting
// for an attempt (including retries) or being executed.
func (s *WorkerStats) Pending() int64 {
	s.mu.Lock()
	rs := make([]*Runner, 0, len(s.runners))
	for r := range s.runners {
		rs = append(rs, r)
	}
	s.mu.Unlock()
	var n int64
	for _, r := range rs {
		n += int64(r.Backlog())
	}
	return n
}

// track counts a started Runner's backlog in Pending; untrack stops
// counting it once it stopped.
func (s *WorkerStats) track(r *Runner) {
	s.mu.Lock()
	s.runners[r] = true
	s.mu.Unlock()
}

func (s *WorkerStats) untrack(r *Runner) {
	s.mu.Lock()
	delete(s.runners, r)
	s.mu.Unlock()
}

// Effects returns the count of committed transitions into status, or of
// the committed records counted under a label of their own: "duplicate"
// (an intent of a key the ledger holds), "resolved" (an operator's
// resolve), "stale-report" (an executor's report the ledger had moved past).
func (s *WorkerStats) Effects(effect, status string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byES[[2]string{effect, status}]
}

func (s *WorkerStats) add(effect, status string) {
	s.mu.Lock()
	s.byES[[2]string{effect, status}]++
	s.mu.Unlock()
}
