package sideeffects_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// TestExecutorRunnerWaitsForVerification is the fault-matrix row "previous
// owner's ledger transaction open during a rebalance": instance a commits
// Start(K) in a transaction whose EndTxn the broker holds, while the group
// moves K's partition to instance b (a cannot heartbeat or rejoin behind the
// held request, so the group drops it). Then the EndTxn is let through: a's
// transaction commits, and a may call K (a's call hangs until its webhook
// timeout).
//
// b must not start K before a's transaction resolved and a's call deadline
// passed: until then the ledger b may trust says nothing of K's attempt.
// What holds b back is the broker: a's transaction carries an offset of the
// executor group for K's partition (the fence every state-changing
// transaction adds, internal/core/eos/fence.go), so b's offset fetch
// (require_stable, KIP-447) is answered UNSTABLE_OFFSET_COMMIT until a's
// transaction resolves, and b verifies – restores, starts its Runner – only
// after that. The test injects no answer: it holds a's EndTxn, and listens
// to b's client for the UNSTABLE_OFFSET_COMMIT answers. (Until issue 22 it
// answered b's fetches UNSTABLE_OFFSET_COMMIT itself, and passed with the
// fence removed.)
// Before fd42fd9 b started its Runner at the first restore, saw K pending
// and started it at once, a second before a's transaction committed its own
// Start of K: two starts of one attempt, two requests at once. Afterwards
// b's Pebble ledger must agree with the changelog up to the offset it stores
// (a new owner that wrote past a previous owner's open transaction would
// never restore that transaction's records).
func TestExecutorRunnerWaitsForVerification(t *testing.T) {
	t.Parallel() // mostly waits: a held EndTxn, a rebalance, a webhook hung to its timeout
	const webhookTimeout = 2 * time.Second
	const lateKey = "k-late"
	emb, brokers, keys := fxSetup(t, 10)
	// a's first call of the late key hangs until its timeout (the call a
	// makes once its held transaction commits); later calls, by whichever
	// instance owns the partition then, are answered.
	var aHung atomic.Bool
	rc := newFxReceiver(t, 50*time.Millisecond, func(by, key string) bool {
		return by == "a" && key == lateKey && aHung.CompareAndSwap(false, true)
	})
	dir := t.TempDir()
	opts := func(id string, copts ...kgo.Opt) fxOpts {
		return fxOpts{brokers: brokers, id: id, url: rc.url(id), dir: dir, clientOpts: copts,
			transactionTimeout: 20 * time.Second, sessionTimeout: 6 * time.Second, webhookTimeout: webhookTimeout, workers: 2}
	}
	// a's EndTxn is held on the broker for longer than kgo's default
	// request timeout overhead (10s); kgo would abandon it and send it
	// again. Let a's client wait instead, as it would for a slow broker.
	a := startFxWorker(t, opts("a", kgo.RequestTimeoutOverhead(40*time.Second)))
	testkit.Await(t, 30*time.Second, "a to succeed every key", func() bool {
		if a.returned() {
			t.Fatalf("a: Run returned: %v", a.err)
		}
		return a.succeeded() == len(keys)
	})

	recs, _ := readLedgerLog(t, brokers)
	pidA := recs[0].producerID // every ledger record so far is a's

	// Hold a's second committing EndTxn from now: the first commits the
	// late key's intent (pending), the second a's Start of it.
	c := emb.Cluster
	txnA := fxName + "-executor-a"
	var seen atomic.Int32
	held, release := make(chan time.Time, 1), make(chan struct{})
	var released atomic.Bool
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.EndTxnRequest)
		if r.TransactionalID != txnA || !r.Commit || released.Load() {
			return nil, nil, false
		}
		if n := seen.Add(1); n < 2 {
			return nil, nil, false
		} else if n == 2 {
			held <- time.Now()
		}
		c.SleepControl(func() { <-release })
		return nil, nil, false // then handled as usual: it commits
	})
	t.Cleanup(func() {
		if released.CompareAndSwap(false, true) {
			close(release)
		}
	})
	if err := testkit.Produce(context.Background(), brokers, fxEffects, []workload.Record{fxIntent(lateKey)}); err != nil {
		t.Fatal(err)
	}
	var heldAt time.Time
	select {
	case heldAt = <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("a never sent the EndTxn of its Start of the late key")
	}

	// b's client reports what the broker answers its offset fetches; the
	// test only listens.
	unstable := &unstableAnswers{}
	b := startFxWorker(t, opts("b", kgo.WithLogger(unstable)))
	testkit.Await(t, 30*time.Second, "b to be assigned both partitions", func() bool { return len(b.w.Stats().Assigned()) == 2 })
	assignedB := time.Since(heldAt)
	// Hold a's transaction until b has been answered UNSTABLE_OFFSET_COMMIT
	// twice (kgo asks again after 1 s: b waited that long with K's
	// partition assigned), or b called the late key, or 8 s passed – well
	// within a's transaction timeout. Then let a's transaction through.
	// Without offsets of the group in a's transaction b's fetch is stable at
	// once: b goes on to verify its tasks (its restore then waits for the
	// changelog's last stable offset, a second guard) and is never told.
	err := testkit.WaitFor(context.Background(), 8*time.Second, func() bool {
		if unstable.count() >= 2 {
			return true
		}
		calls, _, _ := rc.snapshot()
		return slices.ContainsFunc(calls, func(c fxCall) bool { return c.by == "b" && c.key == lateKey })
	})
	unstableWhileHeld := unstable.count()
	if unstableWhileHeld == 0 {
		t.Errorf("the broker never answered b's offset fetch with UNSTABLE_OFFSET_COMMIT while a's transaction was open (waited: %v): a's transaction carried no offsets for the group (its fence, internal/core/eos/fence.go)", err)
	}
	released.Store(true)
	close(release)
	releaseAt := time.Now()

	testkit.Await(t, 40*time.Second, "the late key to succeed", func() bool {
		recs, _ := readLedgerLog(t, brokers)
		e, ok := lastEntries(recs)[lateKey]
		return ok && e.Status == effect.Succeeded
	})
	errA := a.stop(t)
	if err := b.stop(t); err != nil {
		t.Errorf("b: Run: %v", err)
	}

	log, _ := readLedgerLog(t, brokers)
	var startA *effect.Entry // a's Start of the late key, if it committed
	for i, r := range log {
		if r.producerID == pidA && r.entry.Key == lateKey && r.entry.Status == effect.InFlight {
			startA = &log[i].entry
		}
	}
	if startA == nil || len(startA.History) == 0 {
		t.Fatalf("a's held transaction with its Start of %s did not commit (a's Run returned %v): the scenario did not happen", lateKey, errA)
	}
	calls, _, _ := rc.snapshot()
	var callA, callB *fxCall
	for i, c := range calls {
		if c.key != lateKey {
			continue
		}
		switch {
		case c.by == "a" && callA == nil:
			callA = &calls[i]
		case c.by == "b" && callB == nil:
			callB = &calls[i]
		}
	}
	since := func(at time.Time) string { return at.Sub(heldAt).Round(10 * time.Millisecond).String() }
	// a's call may run until its deadline: its recorded start plus the
	// webhook timeout, or (without a deadline kept by the Runner) its own
	// start plus the timeout.
	deadline := startA.History[0].Start.Add(webhookTimeout)
	aCalled := "a did not call it (its deadline had passed)"
	if callA != nil {
		aCalled = "a called it at hold+" + since(callA.start)
		if d := callA.start.Add(webhookTimeout); d.After(deadline) {
			deadline = d
		}
	}
	bFirst := "b never called it"
	beforeVerified, beforeDeadline := 0, 0
	if callB != nil {
		bFirst = "b first called it at hold+" + since(callB.start)
		if callB.start.Before(releaseAt) {
			beforeVerified++
			t.Errorf("b called %s at hold+%s, before a's transaction was let through at hold+%s: b's Runner started before verification",
				lateKey, since(callB.start), since(releaseAt))
		}
		if callB.start.Before(deadline) {
			beforeDeadline++
			t.Errorf("b called %s at hold+%s, before a's call could have ended (deadline hold+%s)", lateKey, since(callB.start), since(deadline))
		}
	}

	final, illegal := checkLedgerLog(t, log, func(pid int64) string {
		if pid == pidA {
			return "a"
		}
		return "b"
	})
	_, _, notOnce := checkExactlyOnce(t, append(keys, lateKey), final, rc)
	mismatched := checkStoreAgrees(t, b, log)
	t.Logf("a's EndTxn with Start(%s) held %s; b assigned at hold+%s; %s (deadline hold+%s); %s; a's Run returned %v; b's offset fetches answered UNSTABLE_OFFSET_COMMIT while a's transaction was held %d; b's calls before a's transaction resolved %d, before a's call deadline %d; illegal ledger transitions %d, keys not executed exactly once %d, b's Pebble entries disagreeing with the changelog %d",
		lateKey, releaseAt.Sub(heldAt).Round(100*time.Millisecond), assignedB.Round(100*time.Millisecond), aCalled, since(deadline),
		bFirst, errA, unstableWhileHeld, beforeVerified, beforeDeadline, illegal, notOnce, mismatched)
}

// unstableAnswers is a kgo.Logger that counts the client's reports of an
// UNSTABLE_OFFSET_COMMIT answer (kgo logs each partition error of its
// group's offset fetch with the error, then asks again after 1 s). It
// observes; it answers nothing in the broker's place.
type unstableAnswers struct{ n atomic.Int32 }

func (u *unstableAnswers) Level() kgo.LogLevel { return kgo.LogLevelInfo }

func (u *unstableAnswers) Log(_ kgo.LogLevel, _ string, keyvals ...any) {
	for _, v := range keyvals {
		if err, ok := v.(error); ok && errors.Is(err, kerr.UnstableOffsetCommit) {
			u.n.Add(1)
		}
	}
}

func (u *unstableAnswers) count() int { return int(u.n.Load()) }

// checkStoreAgrees compares a worker's Pebble ledger, partition by partition,
// with the changelog's committed records below the changelog offset the
// store says it reflects (state.Store.ChangelogOffset): the same entries,
// byte for byte. It returns the number of entries that differ.
func checkStoreAgrees(t *testing.T, fw *fxWorker, log []ledgerRecord) int {
	t.Helper()
	bad := 0
	report := func(format string, args ...any) {
		if bad++; bad <= 5 {
			t.Errorf(format, args...)
		}
	}
	for p := range int32(2) {
		task := state.Task{Topic: fxEffects, Partition: p}
		upTo, err := fw.st.ChangelogOffset(task)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][]byte{}
		for _, r := range log {
			if r.partition == p && r.offset < upTo {
				want[r.entry.Key] = r.value
			}
		}
		got := map[string][]byte{}
		prefix := append(task.Prefix(), effect.KeyPrefix)
		err = fw.st.Scan(prefix, func(k, v []byte) error {
			got[string(k[len(prefix):])] = bytes.Clone(v)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for k, w := range want {
			if g, ok := got[k]; !ok || !bytes.Equal(g, w) {
				report("%s's Pebble ledger, partition %d (changelog offset %d): key %s is %q, the changelog says %q", fw.id, p, upTo, k, g, w)
			}
		}
		for k, g := range got {
			if _, ok := want[k]; !ok {
				report("%s's Pebble ledger, partition %d (changelog offset %d): key %s is %q, the changelog has no record of it", fw.id, p, upTo, k, g)
			}
		}
	}
	return bad
}
