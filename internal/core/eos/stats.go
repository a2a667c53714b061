package eos

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/projector-dev/projector/internal/core/state"
)

// Stats are the loop's counters: transactions, restores, assignment and
// readiness. Safe for concurrent use.
type Stats struct {
	mu       sync.Mutex
	txns     map[string]int64
	txnTime  []time.Duration // recent committed transaction durations (ring)
	restored int64
	retries  int64 // restore attempts repeated after a broker error
	// standby: the standby tasks (standby.go), how many of them reached
	// their changelog's end in their last read, and the changelog records
	// their reads wrote.
	standbyTasks, standbyCaught int
	standbyRestored             int64
	holds                       int64 // transactions aborted on a HoldError
	assigned                    map[state.Task]bool
	ready                       bool
	reason                      string // why not ready
	// readyCh is closed while ready and replaced by an open one when the
	// loop stops being ready (WaitReady).
	readyCh   chan struct{}
	missing   []string
	observers []func(TxnObservation)
}

// TxnObservation is reported to observers after every transaction.
type TxnObservation struct {
	Result   string // committed, aborted, failed
	Duration time.Duration
}

// NewStats returns empty counters.
func NewStats() *Stats {
	return &Stats{txns: map[string]int64{}, assigned: map[state.Task]bool{}, readyCh: make(chan struct{})}
}

func (s *Stats) addTxn(result string, d time.Duration) {
	s.mu.Lock()
	s.txns[result]++
	if result == "committed" {
		if len(s.txnTime) < 4096 {
			s.txnTime = append(s.txnTime, d)
		} else {
			s.txnTime[s.txns[result]%4096] = d
		}
	}
	obs := s.observers
	s.mu.Unlock()
	for _, o := range obs {
		o(TxnObservation{Result: result, Duration: d})
	}
}

func (s *Stats) addRestored(n int) {
	s.mu.Lock()
	s.restored += int64(n)
	s.mu.Unlock()
}

func (s *Stats) addStandbyRestored(n int) {
	s.mu.Lock()
	s.standbyRestored += int64(n)
	s.mu.Unlock()
}

// setStandby records the standby task count (tasks < 0: unchanged) and how
// many are caught up.
func (s *Stats) setStandby(tasks, caught int) {
	s.mu.Lock()
	if tasks >= 0 {
		s.standbyTasks = tasks
	}
	s.standbyCaught = caught
	s.mu.Unlock()
}

// Standby reports the standby replicas' state: the standby tasks, how many
// of them reached their changelog's end (as listed when their last read
// started), and the changelog records the standby reads have written.
func (s *Stats) Standby() (tasks, caughtUp int, records int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.standbyTasks, s.standbyCaught, s.standbyRestored
}

func (s *Stats) setAssigned(id state.Task, on bool) {
	s.mu.Lock()
	if on {
		s.assigned[id] = true
	} else {
		delete(s.assigned, id)
	}
	s.mu.Unlock()
}

func (s *Stats) setReadiness(r bool, reason string) {
	s.mu.Lock()
	switch {
	case r && !s.ready:
		close(s.readyCh)
	case !r && s.ready:
		s.readyCh = make(chan struct{})
	}
	s.ready, s.reason = r, reason
	s.mu.Unlock()
}

func (s *Stats) setMissing(topics []string) {
	s.mu.Lock()
	s.missing = slices.Clone(topics)
	s.mu.Unlock()
}

func (s *Stats) addRestoreRetry() {
	s.mu.Lock()
	s.retries++
	s.mu.Unlock()
}

func (s *Stats) addHold() {
	s.mu.Lock()
	s.holds++
	s.mu.Unlock()
}

// Holds counts the transactions aborted because a record had to wait
// (HoldError): the Schema Registry was unavailable.
func (s *Stats) Holds() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holds
}

// RestoreRetries counts restore attempts repeated after a broker error.
func (s *Stats) RestoreRetries() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.retries
}

// MissingInputs lists the input topics the loop waits for (they do not
// exist, and the loop does not create them).
func (s *Stats) MissingInputs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.missing)
}

// Observe registers fn to be called after every transaction (metrics).
func (s *Stats) Observe(fn func(TxnObservation)) {
	s.mu.Lock()
	s.observers = append(s.observers, fn)
	s.mu.Unlock()
}

// Transactions returns the count of transactions by result.
func (s *Stats) Transactions(result string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.txns[result]
}

// Restored is the number of changelog records restored into Pebble.
func (s *Stats) Restored() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restored
}

// Ready reports whether the loop has joined its group and restored every
// partition assigned to it (none assigned counts: an idle instance is
// ready).
func (s *Stats) Ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

// WaitReady returns nil once the loop is ready (at once if it is), or
// ctx's error.
func (s *Stats) WaitReady(ctx context.Context) error {
	s.mu.Lock()
	ch := s.readyCh
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Readiness is Ready with the reason when not ready ("" when ready).
func (s *Stats) Readiness() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ready && s.reason == "" {
		return false, "starting"
	}
	return s.ready, s.reason
}

// Assigned lists the assigned tasks in order.
func (s *Stats) Assigned() []state.Task {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]state.Task, 0, len(s.assigned))
	for id := range s.assigned {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// TxnLatency returns the p-th percentile (0..1) of recent committed
// transaction durations.
func (s *Stats) TxnLatency(p float64) time.Duration {
	s.mu.Lock()
	d := append([]time.Duration(nil), s.txnTime...)
	s.mu.Unlock()
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[int(p*float64(len(d)-1))]
}
