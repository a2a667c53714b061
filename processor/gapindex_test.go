package processor_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
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

// skewedClock is a clock the test moves forward.
type skewedClock struct{ skew atomic.Int64 }

func (c *skewedClock) now() time.Time      { return time.Now().Add(time.Duration(c.skew.Load())) }
func (c *skewedClock) set(d time.Duration) { c.skew.Store(int64(d)) }
func gapVersions(vs ...int) (rs []workload.Record) {
	for _, v := range vs {
		rs = append(rs, gapEvent(v, "CaseUpdated", ""))
	}
	return rs
}

// idleTransactions counts the transactions in commits during d with no input: a
// gap the index keeps after it closed makes the loop expire it without end.
func idleTransactions(in *instance, d time.Duration) int64 {
	c0 := in.p.Stats().Transactions("committed")
	time.Sleep(d)
	return in.p.Stats().Transactions("committed") - c0
}

// v1 applied, v3 held (its payload is not an object: its application will
// fail), v2 fills the gap: v3 is drained, fails, is dead-lettered. Nothing is
// held any more, and the gap index must say so.
func TestGapIndexFailedDrainCloses(t *testing.T) {
	e := newEnv(t, 1)
	var clock skewedClock
	in := e.start(instOpts{maxRecs: 300, policy: projection.Skip, hold: time.Minute, now: clock.now})
	e.produce([]workload.Record{gapEvent(1, "CaseUpdated", `{"a":1}`), gapEvent(3, "CaseUpdated", `[1]`)})
	e.waitCaughtUp(time.Minute)
	time.Sleep(500 * time.Millisecond)
	e.produce([]workload.Record{gapEvent(2, "CaseUpdated", `{"b":2}`)})
	e.waitCaughtUp(time.Minute)
	time.Sleep(time.Second)
	t.Logf("gaps after v2: %+v; dead letters: %d", in.p.Stats().Gaps(), len(e.read(dlqTopic)))
	clock.set(2 * time.Minute)
	time.Sleep(time.Second)
	n := idleTransactions(in, 3*time.Second)
	t.Logf("gaps: %+v; committed transactions in 3s with no input: %d", in.p.Stats().Gaps(), n)
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	if n > 2 {
		t.Errorf("phantom gap: %d empty transactions in 3s", n)
	}
}

// Version 1 applied, v3 and v5 held at t0. At t0+50s v2 arrives: v3 drains,
// v5 stays held behind a new gap that opens at t0+50s and must wait a full
// hold timeout (1m). The clock reaches t0+65s right after that transaction
// commits. v5 must not be dead-lettered yet.
func TestGapExpiryWaitsForTheMovedGap(t *testing.T) {
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
	e.waitCaughtUp(time.Minute)
	time.Sleep(500 * time.Millisecond)
	clock.set(50 * time.Second)
	armed.Store(true)
	e.produce(gapVersions(2))
	e.waitCaughtUp(time.Minute)
	time.Sleep(2 * time.Second)
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
	e := newEnv(t, 1)
	var clock skewedClock
	in := e.start(instOpts{maxRecs: 300, policy: projection.Skip, hold: time.Minute, now: clock.now})
	e.produce(gapVersions(1, 3, 5))
	e.waitCaughtUp(time.Minute)
	time.Sleep(500 * time.Millisecond)
	clock.set(61 * time.Second)
	time.Sleep(2 * time.Second)
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
	e := newEnv(t, 1)
	var clock skewedClock
	in := e.start(instOpts{maxRecs: 300, policy: projection.Skip, hold: time.Minute, now: clock.now})
	e.produce(gapVersions(1, 3))
	e.waitCaughtUp(time.Minute)
	time.Sleep(500 * time.Millisecond)
	clock.set(61 * time.Second)
	time.Sleep(time.Second)
	n := idleTransactions(in, 2*time.Second)
	t.Logf("gaps: %+v; transactions in 2s idle: %d", in.p.Stats().Gaps(), n)
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	if n > 2 {
		t.Errorf("phantom gap keeps the loop busy")
	}
}
