package processor_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/core/topicread"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/processor"
)

// TestStandbyTakeover (issue 26, docs/decisions/017): two instances with one
// standby replica, so each keeps a copy of the other's partitions. One is
// killed for good: it crashes (no leave, as a killed process) and never
// comes back. After its session expires the survivor owns every partition.
// It restores almost nothing – its standby had read the dead member's
// changelog already – and the output is exactly the model's.
//
//   - after-commit: the victim dies right after a commit, with no
//     transaction open; the survivor is ready within 5 s of the assignment.
//   - mid-transaction: the victim dies with its transaction open. The
//     survivor's offset fetch waits (KIP-447) until the broker aborts that
//     transaction at its timeout (8 s here), standby or not; ready within
//     5 s of that.
func TestStandbyTakeover(t *testing.T) {
	t.Run("after-commit", func(t *testing.T) {
		t.Parallel() // mostly waits for the dead member's session to expire
		standbyTakeover(t, 1701, false)
	})
	t.Run("mid-transaction", func(t *testing.T) {
		t.Parallel()
		standbyTakeover(t, 1702, true)
	})
}

func standbyTakeover(t *testing.T, seed uint64, midTxn bool) {
	const txnTimeout = 8 * time.Second
	e := newEnv(t, 4)
	recs, exp := genWorkload(seed, 20_000, 2_000, nil)
	withStandby := func(c *processor.Config, _ *state.Store) {
		c.StandbyReplicas = 1
		c.TransactionTimeout = txnTimeout
	}
	var kill atomic.Bool
	died := func() error {
		if kill.Load() {
			return errCrash
		}
		return nil
	}
	hooks := &eos.Hooks{AfterCommit: died}
	if midTxn {
		hooks = &eos.Hooks{AfterStage: died}
	}
	w1, err := e.startWith(instOpts{id: "w1"}, state.Options{}, withStandby)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := e.startWith(instOpts{id: "w2", hooks: hooks}, state.Options{}, withStandby)
	if err != nil {
		t.Fatal(err)
	}
	// A check that fails stops the test with the workers still running:
	// they must stop before the test's directories go.
	var w1Stopped, w2Ended bool
	t.Cleanup(func() {
		if !w2Ended {
			w2.cancel()
			_ = w2.wait(t, time.Minute)
		}
		if !w1Stopped {
			_ = w1.stop(t)
		}
	})
	// The group is balanced before the first record: the dead member's
	// partitions are then processed by it alone, and the survivor has them
	// only through its standby (had w1 processed them before w2 joined, its
	// store would hold them already and the standby would read nothing).
	twoEach := func() bool {
		return len(w1.p.Stats().Assigned()) == 2 && len(w2.p.Stats().Assigned()) == 2
	}
	testkit.Await(t, time.Minute, "two partitions each", twoEach)
	victim := tasksOf(w2.p.Stats().Assigned())
	most := len(recs) * 4 / 5
	e.produce(recs[:most])
	e.waitCaughtUp(2 * time.Minute)
	if !twoEach() || !slices.Equal(tasksOf(w2.p.Stats().Assigned()), victim) {
		t.Fatalf("the group rebalanced while the records were processed: w2 owns %v, had %v", w2.p.Stats().Assigned(), victim)
	}
	changelog := processor.ChangelogTopic(group, inputTopic)
	// The survivor's standby has read the dead member's changelog to its end.
	// No transaction is open now: the last stable offsets are the ends.
	ends, _, err := topicread.StableEnds(context.Background(), []kgo.Opt{kgo.SeedBrokers(e.brokers...)}, changelog)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Await(t, time.Minute, "the standby at the changelog's end", func() bool {
		pos, err := w1.store.Positions()
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range victim {
			if pos[id] < ends[changelog][id.Partition].End {
				return false
			}
		}
		return true
	})
	full := changelogRecords(e.read(changelog), victim)
	if sb := w1.p.Stats().Standby(); sb.Partitions != 2 || sb.Records == 0 {
		t.Fatalf("survivor's standby before the kill: %+v, want 2 partitions and records read", sb)
	}
	restoredBefore := w1.p.Stats().Restored()

	kill.Store(true)
	e.produce(recs[most:])
	err = w2.wait(t, time.Minute)
	w2Ended = true
	if !isCrash(err) {
		t.Fatalf("victim: %v, want the injected crash", err)
	}
	killed := time.Now()
	testkit.Await(t, time.Minute, "the survivor to own every partition", func() bool {
		return len(w1.p.Stats().Assigned()) == 4
	})
	assigned := time.Now()
	testkit.Await(t, time.Minute, "the survivor to be ready", func() bool {
		return w1.p.Stats().Ready() && len(w1.p.Stats().Assigned()) == 4
	})
	ready := time.Now()
	restored := w1.p.Stats().Restored() - restoredBefore
	t.Logf("takeover: assigned %s after the kill, ready %s after the assignment; restored %d changelog records (a takeover without a standby: %d)",
		assigned.Sub(killed).Round(time.Millisecond), ready.Sub(assigned).Round(time.Millisecond), restored, full)
	// Without a transaction left open the wait is the restore's; with one,
	// the broker's abort of it at its timeout (from its start, before the
	// kill) comes first.
	limit := assigned.Add(5 * time.Second)
	if midTxn {
		limit = killed.Add(txnTimeout + 5*time.Second)
	}
	if ready.After(limit) {
		t.Errorf("the standby owner was ready %s after the assignment (%s after the kill), want ≤ 5s",
			ready.Sub(assigned).Round(time.Millisecond), ready.Sub(killed).Round(time.Millisecond))
	}
	if full < 100 || restored*10 > full {
		t.Errorf("takeover restored %d of the %d changelog records of the dead member's partitions: the standby did not spare the restore", restored, full)
	}
	e.waitCaughtUp(2 * time.Minute)
	w1Stopped = true
	if err := w1.stop(t); err != nil {
		t.Fatal(err)
	}
	e.checkFigure(exp, len(recs), 1, 0, seed)
}

func tasksOf(ps []processor.Partition) []state.Task {
	out := make([]state.Task, len(ps))
	for i, p := range ps {
		out[i] = state.Task{Topic: p.Topic, Partition: p.Partition}
	}
	return out
}

// changelogRecords counts the records (committed changelog records) of the
// tasks' partitions: what a restore from an empty store reads.
func changelogRecords(recs []*kgo.Record, tasks []state.Task) int64 {
	var n int64
	for _, r := range recs {
		if slices.ContainsFunc(tasks, func(id state.Task) bool { return id.Partition == r.Partition }) {
			n++
		}
	}
	return n
}
