package metrics

import (
	"fmt"

	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/sideeffects"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// The public packages' counters as the metrics read them: by label, the
// processor's and the executor's loops alike.

// Executor adapts the executor's counters to ExecutorSource: its
// partitions and transaction observations are the executor's own types,
// field for field the processor's. A nil s gives nil (no executor).
func Executor(s *sideeffects.WorkerStats) ExecutorSource {
	if s == nil {
		return nil
	}
	return executorStats{s}
}

type executorStats struct{ *sideeffects.WorkerStats }

// Effects is the count of a status label: an executor status, or
// "duplicate"; 0 for the processor's labels.
func (s executorStats) Effects(eff, label string) int64 {
	if label == "duplicate" {
		return s.WorkerStats.Duplicates(eff)
	}
	st, err := effect.ParseStatus(label)
	if err != nil {
		return 0
	}
	return s.WorkerStats.Effects(eff, st)
}

// Processor adapts the processor's counters to Source: its outcomes and
// intent statuses are typed constants, the metrics' labels their names. A
// nil s gives nil (no processor).
func Processor(s *processor.Stats) Source {
	if s == nil {
		return nil
	}
	return processorStats{s}
}

type processorStats struct{ *processor.Stats }

var (
	outcomeByLabel = labels(processor.Outcomes)
	intentByLabel  = labels(processor.IntentStatuses)
)

func labels[T fmt.Stringer](vs []T) map[string]T {
	m := make(map[string]T, len(vs))
	for _, v := range vs {
		m[v.String()] = v
	}
	return m
}

// Events is the count of an outcome label; 0 for an unknown one.
func (s processorStats) Events(projection, label string) int64 {
	oc, ok := outcomeByLabel[label]
	if !ok {
		return 0
	}
	return s.Stats.Events(projection, oc)
}

// Effects is the count of an intent status label; 0 for the executor's.
func (s processorStats) Effects(eff, label string) int64 {
	st, ok := intentByLabel[label]
	if !ok {
		return 0
	}
	return s.Stats.Effects(eff, st)
}

func (s executorStats) Assigned() []processor.Partition {
	ps := s.WorkerStats.Assigned()
	out := make([]processor.Partition, len(ps))
	for i, p := range ps {
		out[i] = processor.Partition(p)
	}
	return out
}

func (s executorStats) Observe(fn func(processor.TxnObservation)) {
	s.WorkerStats.Observe(func(o sideeffects.TxnObservation) { fn(processor.TxnObservation(o)) })
}
