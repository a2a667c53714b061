package sideeffects

import (
	"context"
	"sync"
	"time"

	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// WorkerStats counts what the worker committed.
type WorkerStats struct {
	loop    *eos.Stats
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

// Effects returns the count of committed transitions of effect's entries
// into status.
func (s *WorkerStats) Effects(effect string, status effect.Status) int64 {
	return s.count(effect, status.String())
}

// Duplicates returns the count of committed intents of effect whose key the
// ledger held already.
func (s *WorkerStats) Duplicates(effect string) int64 { return s.count(effect, labelDuplicate) }

// Resolved returns the count of effect's entries an operator resolved.
func (s *WorkerStats) Resolved(effect string) int64 { return s.count(effect, labelResolved) }

// StaleReports returns the count of reports of effect's attempts (from a
// previous owner of the partition) that the ledger had moved past.
func (s *WorkerStats) StaleReports(effect string) int64 { return s.count(effect, labelStaleReport) }

// The labels counted beside the statuses.
const (
	labelDuplicate   = "duplicate"
	labelResolved    = "resolved"
	labelStaleReport = "stale-report"
)

func (s *WorkerStats) count(effect, label string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byES[[2]string{effect, label}]
}

func (s *WorkerStats) add(effect, status string) {
	s.mu.Lock()
	s.byES[[2]string{effect, status}]++
	s.mu.Unlock()
}

// The transaction loop's counters, as WorkerStats reports them (the
// processor's Stats reports its loop's the same way).

// TxnObservation is what an observer (WorkerStats.Observe) is told after
// every transaction.
type TxnObservation struct {
	// Result is "committed", "aborted" or "failed".
	Result string
	// Duration is the transaction's, from Begin to the end of End.
	Duration time.Duration
}

// Partition is one partition of the effects topic the worker owns.
type Partition struct {
	Topic     string
	Partition int32
}

// Observe registers fn to be called after every transaction (metrics), on
// the loop's goroutine: it must be quick.
func (s *WorkerStats) Observe(fn func(TxnObservation)) {
	s.loop.Observe(func(o eos.TxnObservation) { fn(TxnObservation{Result: o.Result, Duration: o.Duration}) })
}

// Transactions returns the count of transactions by result ("committed",
// "aborted", "failed").
func (s *WorkerStats) Transactions(result string) int64 { return s.loop.Transactions(result) }

// Restored is the number of changelog records restored into the store.
func (s *WorkerStats) Restored() int64 { return s.loop.Restored() }

// RestoreRetries counts restore attempts repeated after a broker error.
func (s *WorkerStats) RestoreRetries() int64 { return s.loop.RestoreRetries() }

// MissingInputs lists the input topics the worker waits for.
func (s *WorkerStats) MissingInputs() []string { return s.loop.MissingInputs() }

// Ready reports whether the worker has joined its group and restored every
// partition assigned to it (none assigned counts: an idle instance is
// ready).
func (s *WorkerStats) Ready() bool { return s.loop.Ready() }

// Readiness is Ready with the reason when not ready ("" when ready).
func (s *WorkerStats) Readiness() (bool, string) { return s.loop.Readiness() }

// WaitReady returns nil once the worker is Ready (at once if it is), or
// ctx's error.
func (s *WorkerStats) WaitReady(ctx context.Context) error { return s.loop.WaitReady(ctx) }

// Assigned lists the owned partitions of the effects topic, in order.
func (s *WorkerStats) Assigned() []Partition {
	ts := s.loop.Assigned()
	out := make([]Partition, len(ts))
	for i, t := range ts {
		out[i] = Partition{Topic: t.Topic, Partition: t.Partition}
	}
	return out
}

// TxnLatency returns the p-th percentile (0..1) of recent committed
// transaction durations.
func (s *WorkerStats) TxnLatency(p float64) time.Duration { return s.loop.TxnLatency(p) }

// Ready reports whether the worker has joined its group and restored every
// partition assigned to it (WorkerStats.Ready).
func (w *Worker) Ready() bool { return w.stats.Ready() }

// WaitReady returns nil once the worker is Ready, or ctx's error: start
// Run, then wait for this instead of polling.
func (w *Worker) WaitReady(ctx context.Context) error { return w.stats.WaitReady(ctx) }
