package processor

import (
	"context"
	"time"

	"github.com/projector-dev/projector/internal/core/eos"
)

// The transaction loop's counters, as Stats reports them (the executor's
// WorkerStats reports its loop's the same way).

// TxnObservation is what an observer (Stats.Observe) is told after every
// transaction.
type TxnObservation struct {
	// Result is "committed", "aborted" or "failed".
	Result string
	// Duration is the transaction's, from Begin to the end of End.
	Duration time.Duration
}

// Partition is one partition of an input topic the processor owns.
type Partition struct {
	Topic     string
	Partition int32
}

// Observe registers fn to be called after every transaction (metrics), on
// the loop's goroutine: it must be quick.
func (s *Stats) Observe(fn func(TxnObservation)) {
	s.loop.Observe(func(o eos.TxnObservation) { fn(TxnObservation{Result: o.Result, Duration: o.Duration}) })
}

// Transactions returns the count of transactions by result ("committed",
// "aborted", "failed").
func (s *Stats) Transactions(result string) int64 { return s.loop.Transactions(result) }

// Restored is the number of changelog records restored into the store.
func (s *Stats) Restored() int64 { return s.loop.Restored() }

// StandbyStats are the standby replicas' figures (Config.StandbyReplicas).
type StandbyStats struct {
	// Partitions is how many input partitions this instance keeps a
	// standby copy of; CaughtUp how many of those reached their changelog's
	// end, as listed when their last read started.
	Partitions, CaughtUp int
	// Records counts the changelog records the standby reads wrote into
	// the store (not counted in Restored).
	Records int64
}

// Standby returns the standby replicas' figures.
func (s *Stats) Standby() StandbyStats {
	p, c, r := s.loop.Standby()
	return StandbyStats{Partitions: p, CaughtUp: c, Records: r}
}

// RestoreRetries counts restore attempts repeated after a broker error.
func (s *Stats) RestoreRetries() int64 { return s.loop.RestoreRetries() }

// HeldTransactions counts the transactions aborted because a record had to
// wait (the Schema Registry was unavailable); their records are processed
// again (docs/configuration.md#input-formats).
func (s *Stats) HeldTransactions() int64 { return s.loop.Holds() }

// MissingInputs lists the input topics the processor waits for (they do
// not exist, and Config.WaitForInputs says not to create them).
func (s *Stats) MissingInputs() []string { return s.loop.MissingInputs() }

// Ready reports whether the processor has joined its group and restored
// every partition assigned to it (none assigned counts: an idle instance is
// ready).
func (s *Stats) Ready() bool { return s.loop.Ready() }

// Readiness is Ready with the reason when not ready ("" when ready).
func (s *Stats) Readiness() (bool, string) { return s.loop.Readiness() }

// WaitReady returns nil once the processor is Ready (at once if it is), or
// ctx's error.
func (s *Stats) WaitReady(ctx context.Context) error { return s.loop.WaitReady(ctx) }

// Assigned lists the owned input partitions, in order.
func (s *Stats) Assigned() []Partition {
	ts := s.loop.Assigned()
	out := make([]Partition, len(ts))
	for i, t := range ts {
		out[i] = Partition{Topic: t.Topic, Partition: t.Partition}
	}
	return out
}

// TxnLatency returns the p-th percentile (0..1) of recent committed
// transaction durations.
func (s *Stats) TxnLatency(p float64) time.Duration { return s.loop.TxnLatency(p) }

// Ready reports whether the processor has joined its group and restored
// every partition assigned to it (Stats.Ready).
func (p *Processor) Ready() bool { return p.stats.Ready() }

// WaitReady returns nil once the processor is Ready, or ctx's error: start
// Run, then wait for this instead of polling.
func (p *Processor) WaitReady(ctx context.Context) error { return p.stats.WaitReady(ctx) }
