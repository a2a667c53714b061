package processor_test

import (
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/harness/testsize"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/processor"
)

// smallWorkload generates a seeded stream; at the tests' small size (the
// default: testsize) it is a fifth of the size.
func smallWorkload(seed uint64, events, aggs int) ([]workload.Record, workload.Expect) {
	if testsize.Small() {
		events, aggs = events/5, max(aggs/5, 1)
	}
	o := workload.Defaults()
	o.Seed, o.Events, o.Aggregates = seed, events, aggs
	return workload.Generate(o)
}

// TestExactlyOnceEndToEnd is acceptance 3 of the core issue: ≥ 4 partitions,
// ≥ 100k events over ≥ 10k aggregates with duplicates (some re-serialised),
// reordering, late gaps, stale writers, conflicts and invalid records.
func TestExactlyOnceEndToEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 4)
	recs, exp := smallWorkload(42, lean(100_000), lean(10_000))
	e.produce(recs)
	in := e.start(instOpts{})
	e.waitCaughtUp(5 * time.Minute)
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	st := in.p.Stats()
	for _, c := range []struct {
		outcome processor.Outcome
		want    int
	}{
		{processor.OutcomeApplied, exp.Applied}, {processor.OutcomeDuplicate, exp.Duplicates}, {processor.OutcomeStale, exp.Stale},
		{processor.OutcomeHeld, exp.Held}, {processor.OutcomeConflict, exp.Conflicts}, {processor.OutcomeInvalid, exp.Invalid},
	} {
		if got := st.Outcome(c.outcome); got != int64(c.want) {
			t.Errorf("outcome %s: got %d, want %d", c.outcome, got, c.want)
		}
	}
	e.verify(exp, figure(len(recs), exp, 0, 0))
}

func figure(n int, exp workload.Expect, crashes, aborts int) string {
	return fmtFigure(n, exp.Duplicates, crashes, aborts)
}
