package processor_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/projection"
)

// Gap-index regressions found in review of the overlapped commit (decision
// 004): the index lags the state by one transaction, so it must record every
// step that can change a gap, and expiry must decide on the state itself.

// gapEvent is version v of aggregate GAP-1, of type typ, with the given
// payload ("" for {"v<v>":1}).
func gapEvent(v int, typ, payload string) workload.Record {
	if payload == "" {
		payload = fmt.Sprintf(`{"v%d":1}`, v)
	}
	return workload.Record{Key: []byte("GAP-1"), Value: []byte(fmt.Sprintf(
		`{"eventId":"gap-%d","eventType":%q,"aggregateId":"GAP-1","aggregateType":"RegulatoryCase","aggregateVersion":%d,"payload":%s}`, v, typ, v, payload))}
}

// skewedClock is a clock the test moves forward, and counts its reads. The
// loop reads its clock once per round, right before it asks whether a gap is
// due (eos Loop.Run: cfg.Now, then Handler.Due; an idle round polls for at
// most 100 ms), so n more reads after set mean that at least n-1 rounds
// looked at the gaps with the new time: the signal a test that checks that
// nothing happened waits for, instead of sleeping.
type skewedClock struct{ skew, reads atomic.Int64 }

func (c *skewedClock) now() time.Time {
	c.reads.Add(1)
	return time.Now().Add(time.Duration(c.skew.Load()))
}
func (c *skewedClock) set(d time.Duration) { c.skew.Store(int64(d)) }

// rounds waits until the clock has been read n more times (see skewedClock).
func (c *skewedClock) rounds(t testing.TB, n int64) {
	t.Helper()
	r0 := c.reads.Load()
	testkit.Await(t, time.Minute, fmt.Sprintf("%d loop rounds", n), func() bool { return c.reads.Load() >= r0+n })
}
func gapVersions(vs ...int) (rs []workload.Record) {
	for _, v := range vs {
		rs = append(rs, gapEvent(v, "CaseUpdated", ""))
	}
	return rs
}

// idleRounds is how many loop rounds idleTransactions watches: an idle round
// commits nothing, a phantom gap makes every round commit one.
const idleRounds = 15

// idleTransactions counts the transactions committed over idleRounds rounds
// of the loop with no input: a gap the index keeps after it closed makes the
// loop expire it without end, one transaction a round.
func idleTransactions(t testing.TB, in *instance, clock *skewedClock) int64 {
	c0 := in.p.Stats().Transactions("committed")
	clock.rounds(t, idleRounds)
	return in.p.Stats().Transactions("committed") - c0
}

// awaitHeld waits until n events are held (counted once their transaction
// committed and its hooks ran, which is when the gap index has them).
func awaitHeld(t testing.TB, in *instance, n int64) {
	t.Helper()
	testkit.Await(t, time.Minute, fmt.Sprintf("%d held events", n), func() bool { return in.p.Stats().Outcome(processor.OutcomeHeld) >= n })
}

// awaitExpiries waits until committed transactions took up n gaps for expiry.
func awaitExpiries(t testing.TB, in *instance, n int64) {
	t.Helper()
	testkit.Await(t, time.Minute, fmt.Sprintf("%d gap expiries", n), func() bool {
		total, _ := in.p.Stats().GapExpiries()
		return total >= n
	})
}

// v1 applied, v3 held (its payload is not an object: its application will
// fail), v2 fills the gap: v3 is drained, fails, is dead-lettered. Nothing is
// held any more, and the gap index must say so.
func TestGapIndexFailedDrainCloses(t *testing.T) {
	t.Parallel() // a light worker that mostly waits (the group join, its gap timers)
	e := newEnv(t, 1)
	var clock skewedClock
	in := e.start(instOpts{maxRecs: 300, policy: projection.Skip, hold: time.Minute, now: clock.now})
	e.produce([]workload.Record{gapEvent(1, "CaseUpdated", `{"a":1}`), gapEvent(3, "CaseUpdated", `[1]`)})
	awaitHeld(t, in, 1)
	e.produce([]workload.Record{gapEvent(2, "CaseUpdated", `{"b":2}`)})
	testkit.Await(t, time.Minute, "v3 dead-lettered", func() bool { return in.p.Stats().DeadLetters(processor.ReasonHandlerError) == 1 })
	t.Logf("gaps after v2: %+v; dead letters: %d", in.p.Stats().Gaps(), len(e.read(dlqTopic)))
	clock.set(2 * time.Minute)
	n := idleTransactions(t, in, &clock)
	t.Logf("gaps: %+v; committed transactions in %d rounds with no input: %d", in.p.Stats().Gaps(), idleRounds, n)
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	if n > 2 {
		t.Errorf("phantom gap: %d empty transactions in %d rounds", n, idleRounds)
	}
}

// Version 1 applied, v3 and v5 held at t0. At t0+50s v2 arrives: v3 drains,
// v5 stays held behind a new gap that opens at t0+50s and must wait a full
// hold timeout (1m). The clock reaches t0+65s right after that transaction
// commits. v5 must not be dead-lettered yet.
func TestGapExpiryWaitsForTheMovedGap(t *testing.T) {
	t.Parallel() // a light worker that mostly waits (the group join, its gap timers)
	e := newEnv(t, 1)
	var clock skewedClock
	var armed atomic.Bool
	hooks := &eos.Hooks{AfterCommit: func() error {
		if armed.CompareAndSwap(true, false) {
			clock.set(65 * time.Second)
		}
		return nil
	}}
	in := e.start(instOpts{maxRecs: 300, policy: projection.DeadLetter, hold: time.Minute, now: clock.now, hooks: hooks})
	e.produce(gapVersions(1, 3, 5))
	awaitHeld(t, in, 2)
	clock.set(50 * time.Second)
	armed.Store(true)
	e.produce(gapVersions(2))
	testkit.Await(t, time.Minute, "v3 applied", func() bool { return in.p.Stats().Events("case-overview", processor.OutcomeApplied) >= 3 })
	testkit.Await(t, time.Minute, "a commit to move the clock to t0+65s", func() bool { return !armed.Load() })
	// Every round from here sees t0+65s: 15s into v5's gap, 65s after v3's.
	clock.rounds(t, idleRounds)
	dl := len(e.read(dlqTopic))
	t.Logf("gaps: %+v; dead letters: %d", in.p.Stats().Gaps(), dl)
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	if dl > 0 {
		t.Errorf("v5 dead-lettered 15s into its gap (hold timeout 1m)")
	}
}

// Two gaps (v2 and v4 missing), skip policy. When the hold timeout passes, the
// first gap is skipped (v3 applied); v5 waits behind a new gap that needs its
// own full hold timeout.
func TestGapSkipOneAtATime(t *testing.T) {
	t.Parallel() // a light worker that mostly waits (the group join, its gap timers)
	e := newEnv(t, 1)
	var clock skewedClock
	in := e.start(instOpts{maxRecs: 300, policy: projection.Skip, hold: time.Minute, now: clock.now})
	e.produce(gapVersions(1, 3, 5))
	awaitHeld(t, in, 2)
	clock.set(61 * time.Second)
	awaitExpiries(t, in, 1) // the first gap skipped, v3 applied
	// v5's gap opened at t0+61s: the rounds that follow must leave it.
	clock.rounds(t, idleRounds)
	want := workload.Final{Version: 3, State: map[string]any{"v1": 1.0, "v3": 1.0}}
	rep := testkit.CheckProjection(e.read(projTopic), map[string]workload.Final{"GAP-1": want})
	t.Logf("gaps: %+v; %s", in.p.Stats().Gaps(), rep)
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Errorf("second gap skipped without its own hold timeout")
	}
}

// One held event (v3), skip policy: the timed-out gap is skipped, v3 applied,
// nothing held. The gap index must then be empty and the loop idle.
func TestGapIndexSkipOneHeldCloses(t *testing.T) {
	t.Parallel() // a light worker that mostly waits (the group join, its gap timers)
	e := newEnv(t, 1)
	var clock skewedClock
	in := e.start(instOpts{maxRecs: 300, policy: projection.Skip, hold: time.Minute, now: clock.now})
	e.produce(gapVersions(1, 3))
	awaitHeld(t, in, 1)
	clock.set(61 * time.Second)
	awaitExpiries(t, in, 1)
	n := idleTransactions(t, in, &clock)
	t.Logf("gaps: %+v; transactions in %d idle rounds: %d", in.p.Stats().Gaps(), idleRounds, n)
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	if n > 2 {
		t.Errorf("phantom gap keeps the loop busy")
	}
}
