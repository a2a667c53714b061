package sideeffects_test

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/internal/runtime/state"
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
// Before fd42fd9 b started its Runner at the first restore, saw K pending
// and started it at once, a second before a's transaction committed its own
// Start of K: two starts of one attempt, two requests at once. Afterwards
// b's Pebble ledger must agree with the changelog up to the offset it stores
// (a new owner that wrote past a previous owner's open transaction would
// never restore that transaction's records).
func TestExecutorRunnerWaitsForVerification(t *testing.T) {
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
	waitFor(t, 30*time.Second, "a to succeed every key", func() bool {
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
	var holding, released atomic.Bool
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.EndTxnRequest)
		if r.TransactionalID != txnA || !r.Commit || released.Load() {
			return nil, nil, false
		}
		if n := seen.Add(1); n < 2 {
			return nil, nil, false
		} else if n == 2 {
			holding.Store(true)
			held <- time.Now()
		}
		c.SleepControl(func() { <-release })
		return nil, nil, false // then handled as usual: it commits
	})
	// While a's transaction is open, the group's offset fetches are
	// unstable (KIP-447), as the broker answers when that transaction
	// carries offsets for the group. With fd42fd9 every state-changing
	// transaction does (its fence), so the broker says so by itself; before
	// it, only one that also consumed intents did – common under load, but
	// not in this quiet test, so the broker is told to answer as it would.
	c.ControlKey(int16(kmsg.OffsetFetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if !holding.Load() || released.Load() {
			return nil, nil, false
		}
		c.KeepControl()
		return unstableOffsets(req.(*kmsg.OffsetFetchRequest)), nil, true
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

	b := startFxWorker(t, opts("b"))
	waitFor(t, 30*time.Second, "b to be assigned both partitions", func() bool { return len(b.w.Stats().Assigned()) == 2 })
	assignedB := time.Since(heldAt)
	// Give b every chance to start the key early, then let a's
	// transaction through (well within its transaction timeout).
	time.Sleep(time.Second)
	released.Store(true)
	close(release)
	releaseAt := time.Now()

	waitFor(t, 40*time.Second, "the late key to succeed", func() bool {
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
	t.Logf("a's EndTxn with Start(%s) held %s; b assigned at hold+%s; %s (deadline hold+%s); %s; a's Run returned %v; b's calls before a's transaction resolved %d, before a's call deadline %d; illegal ledger transitions %d, keys not executed exactly once %d, b's Pebble entries disagreeing with the changelog %d",
		lateKey, releaseAt.Sub(heldAt).Round(100*time.Millisecond), assignedB.Round(100*time.Millisecond), aCalled, since(deadline),
		bFirst, errA, beforeVerified, beforeDeadline, illegal, notOnce, mismatched)
}

// unstableOffsets answers an offset fetch with UNSTABLE_OFFSET_COMMIT for
// every partition it asks for.
func unstableOffsets(req *kmsg.OffsetFetchRequest) *kmsg.OffsetFetchResponse {
	resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
	for _, rg := range req.Groups {
		sg := kmsg.NewOffsetFetchResponseGroup()
		sg.Group = rg.Group
		for _, rt := range rg.Topics {
			st := kmsg.NewOffsetFetchResponseGroupTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, p := range rt.Partitions {
				sp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
				sp.Partition, sp.Offset, sp.LeaderEpoch = p, -1, -1
				sp.ErrorCode = kerr.UnstableOffsetCommit.Code
				st.Partitions = append(st.Partitions, sp)
			}
			sg.Topics = append(sg.Topics, st)
		}
		resp.Groups = append(resp.Groups, sg)
	}
	for _, rt := range req.Topics { // before v8: one group
		st := kmsg.NewOffsetFetchResponseTopic()
		st.Topic = rt.Topic
		for _, p := range rt.Partitions {
			sp := kmsg.NewOffsetFetchResponseTopicPartition()
			sp.Partition, sp.Offset, sp.LeaderEpoch = p, -1, -1
			sp.ErrorCode = kerr.UnstableOffsetCommit.Code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

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
