package eos

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/app/broker"
	"github.com/projector-dev/projector/internal/core/state"
)

// touchHandler changes the state of every task the loop offers it (Tasks) in
// each transaction it is due for, consuming nothing: the loop's periodic work
// – gap expiry, dedup sweeps, the executor's ledger transitions – reduced to
// one write per task. Such a transaction is fenced with the task's committed
// offset (fence.go). Its methods run on the loop goroutine; the test reads
// through the mutex.
type touchHandler struct {
	loop *Loop[*touchTask]
	task state.Task // the task whose kgo offsets are recorded

	// abortFirst: the first record processed produces a record the client
	// refuses, so its transaction aborts; the task's partition is then
	// paused until resume, so that no poll consumes it again meanwhile.
	abortFirst bool

	mu       sync.Mutex
	touching bool // Due from now on
	resume   bool // resume the paused partition at the next Due
	aborted  bool
	produced bool
	// rounds counts the transactions begun while touching in which the task
	// was assigned and verified; offered those in which Tasks offered it.
	rounds, offered int
	touched         int               // committed touches of the task
	seen            []kgo.EpochOffset // kgo's CommittedOffsets for the task at each round
	uncommitted     bool              // the task was among kgo's UncommittedOffsets at a round
}

func (h *touchHandler) NewTask(t *Task) *touchTask { return &touchTask{h: h, t: t} }

func (h *touchHandler) Due(time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.resume {
		h.resume = false
		h.loop.sess.Client().ResumeFetchPartitions(map[string][]int32{h.task.Topic: {h.task.Partition}})
	}
	return h.touching
}

func (h *touchHandler) Begin(b *Batch) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.touching {
		return nil
	}
	if t, ok := h.loop.tasks[h.task]; ok && t.verified {
		h.rounds++
		cl := h.loop.sess.Client()
		if eo, ok := cl.CommittedOffsets()[h.task.Topic][h.task.Partition]; ok {
			h.seen = append(h.seen, eo)
		}
		if _, ok := cl.UncommittedOffsets()[h.task.Topic][h.task.Partition]; ok {
			h.uncommitted = true
		}
	}
	h.loop.Tasks(func(tt *touchTask) {
		if tt.t.ID != h.task {
			return
		}
		h.offered++
		tb := b.For(tt.t)
		tb.Txn.Set(append(tt.t.ID.Prefix(), "touch"...), fmt.Appendf(nil, "%d", h.offered))
		tb.OnCommit(func() {
			h.mu.Lock()
			h.touched++
			h.mu.Unlock()
		})
	})
	return nil
}

// snapshot returns what the handler saw so far.
func (h *touchHandler) snapshot() (rounds, offered, touched int, seen []kgo.EpochOffset, uncommitted, aborted bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rounds, h.offered, h.touched, append([]kgo.EpochOffset(nil), h.seen...), h.uncommitted, h.aborted
}

func (h *touchHandler) set(fn func(h *touchHandler)) {
	h.mu.Lock()
	fn(h)
	h.mu.Unlock()
}

// touchTask is touchHandler's TaskHandler.
type touchTask struct {
	h *touchHandler
	t *Task
}

func (tt *touchTask) Restored() error { return nil }
func (tt *touchTask) Revoked()        {}
func (tt *touchTask) Stage(*Batch)    {}

func (tt *touchTask) Process(b *Batch, _ *kgo.Record) error {
	h := tt.h
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.abortFirst || h.produced {
		return nil
	}
	h.produced = true
	// Over the producer's batch limit: kgo fails it with MESSAGE_TOO_LARGE
	// and the loop aborts the transaction (produceFailed).
	b.Produce(&kgo.Record{Topic: "out", Value: make([]byte, 2<<20)})
	b.OnAbort(func() {
		h.mu.Lock()
		h.aborted = true
		h.mu.Unlock()
		h.loop.sess.Client().PauseFetchPartitions(map[string][]int32{h.task.Topic: {h.task.Partition}})
	})
	return nil
}

// placeholderRig is a loop on a fresh kfake cluster over the input "in" (one
// partition) with a touchHandler, and an admin client to read the group's
// committed offsets with.
type placeholderRig struct {
	t     *testing.T
	ctx   context.Context
	h     *touchHandler
	adm   *kadm.Client
	pc    *kgo.Client
	stats *Stats
	done  chan error
	stop  context.CancelFunc
}

func newPlaceholderRig(t *testing.T, records int, start *kgo.Offset, abortFirst bool) *placeholderRig {
	t.Helper()
	c, err := broker.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in", "in.changelog", "out"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	pc, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pc.Close)
	r := &placeholderRig{t: t, ctx: ctx, adm: kadm.NewClient(pc), pc: pc, stats: NewStats(), done: make(chan error, 1)}
	r.produce(records)

	st, err := state.Open("mem", state.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r.h = &touchHandler{task: state.Task{Topic: "in", Partition: 0}, abortFirst: abortFirst}
	r.h.loop = New(Config{
		Group: "g", TransactionalID: "g-t1",
		Session: Session{InstanceID: "t1", Brokers: c.ListenAddrs(), DeadLetterTopic: "in.dlq", Partitions: 1,
			Store: st, MaxRecordsPerTxn: 100, TransactionTimeout: 10 * time.Second, SessionTimeout: 6 * time.Second},
		Inputs:       []string{"in"},
		ChangelogOf:  func(in string) string { return in + ".changelog" },
		CreateInputs: true, StartOffset: start,
		Stats: r.stats,
	}, r.h)
	runCtx, stop := context.WithCancel(ctx)
	r.stop = stop
	go func() { r.done <- r.h.loop.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-r.done; err != nil {
			t.Errorf("Run after cancel: %v", err)
		}
	})
	return r
}

func (r *placeholderRig) produce(n int) {
	r.t.Helper()
	for i := range n {
		if err := r.pc.ProduceSync(r.ctx, &kgo.Record{Value: fmt.Appendf(nil, "r%d", i)}).FirstErr(); err != nil {
			r.t.Fatal(err)
		}
	}
}

// waitFor waits for cond, failing if Run returns or the test's time is up.
func (r *placeholderRig) waitFor(what string, cond func() bool) {
	r.t.Helper()
	for !cond() {
		select {
		case err := <-r.done:
			r.done <- err // for the cleanup
			r.t.Fatalf("Run returned while waiting for %s: %v", what, err)
		case <-r.ctx.Done():
			r.t.Fatalf("timed out waiting for %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// groupOffset is the group's committed offset of in/0 (ok false: none).
func (r *placeholderRig) groupOffset() (int64, bool) {
	r.t.Helper()
	offs, err := r.adm.FetchOffsets(r.ctx, "g")
	if err != nil {
		r.t.Fatal(err)
	}
	o, ok := offs.Lookup("in", 0)
	if !ok || o.Err != nil || o.At < 0 {
		return -1, false
	}
	return o.At, true
}

// checkNothingCommitted: rounds transactions with in/0 assigned and
// verified, and kgo listing placeholder as its committed offset, have run;
// none may have offered the task, committed a change of it, or committed an
// offset for it.
func (r *placeholderRig) checkNothingCommitted(placeholder kgo.EpochOffset) {
	r.t.Helper()
	rounds, offered, touched, seen, uncommitted, _ := r.h.snapshot()
	if !containsOffset(seen, placeholder) || uncommitted {
		r.t.Fatalf("the scenario did not happen: kgo's committed offsets of in/0 over %d rounds %v (want the placeholder %v), among its uncommitted offsets %v", rounds, seen, placeholder, uncommitted)
	}
	if off, ok := r.groupOffset(); ok {
		r.t.Errorf("the group never committed in/0, but after %d transactions that consumed nothing its committed offset is %d: kgo's placeholder %v committed as the fence", rounds, off, placeholder)
	}
	if offered > 0 || touched > 0 {
		r.t.Errorf("in/0 held by kgo's placeholder %v alone: offered to the handler in %d of %d rounds, %d changes of it committed; want 0", placeholder, offered, rounds, touched)
	}
	r.t.Logf("%d rounds with kgo's placeholder %v for in/0: offered %d, committed changes %d", rounds, placeholder, offered, touched)
}

// checkFencedAt: once the group has committed in/0 at want, the task is
// offered again and its changes commit, fenced at want.
func (r *placeholderRig) checkFencedAt(want int64) {
	r.t.Helper()
	r.waitFor(fmt.Sprintf("the group to commit in/0 at %d", want), func() bool {
		off, ok := r.groupOffset()
		return ok && off == want
	})
	_, _, before, _, _, _ := r.h.snapshot()
	r.waitFor("three more changes of in/0 to commit", func() bool {
		_, _, touched, _, _, _ := r.h.snapshot()
		return touched >= before+3
	})
	if off, ok := r.groupOffset(); !ok || off != want {
		r.t.Errorf("after transactions fenced with in/0's committed offset the group's offset is %d (%v), want %d", off, ok, want)
	}
}

func containsOffset(s []kgo.EpochOffset, eo kgo.EpochOffset) bool {
	for _, x := range s {
		if x == eo {
			return true
		}
	}
	return false
}

// TestPlaceholderNeverCommitted: for a partition the group never committed,
// kgo lists {Epoch: -1, Offset: 0} as its committed offset once it polled
// records of it (consumer_group.go, updateUncommitted's "uninit"), and keeps
// it when the transaction aborts. Three records of in/0 are polled; the
// first one's transaction aborts (a record the producer refuses) and in/0 is
// paused. The loop then runs transactions that change the state of the tasks
// it offers and consume nothing: in/0 must not be offered (not held by a
// placeholder), and nothing may commit an offset for it. Then in/0 is
// resumed: its records are consumed and committed (offset 3), and from then
// on its changes commit, fenced at 3.
func TestPlaceholderNeverCommitted(t *testing.T) {
	r := newPlaceholderRig(t, 3, nil, true)
	r.waitFor("the first transaction to abort", func() bool {
		_, _, _, _, _, aborted := r.h.snapshot()
		return aborted
	})
	r.h.set(func(h *touchHandler) { h.touching = true })
	r.waitFor("5 transactions with in/0 assigned and verified", func() bool {
		rounds, _, _, _, _, _ := r.h.snapshot()
		return rounds >= 5
	})
	r.checkNothingCommitted(kgo.EpochOffset{Epoch: -1, Offset: 0})
	r.h.set(func(h *touchHandler) { h.resume = true })
	r.checkFencedAt(3)
}

// TestPlaceholderRebuildFromTime: a loop whose group starts at a time
// (Config.StartOffset AfterMilli, as rebuild --from sets it) on a partition
// the group never committed: kgo lists the time in unix ms as the
// partition's committed offset (consumer_group.go, fetchOffsets: a fetched
// offset < 0 is replaced by the reset offset, kept when ≥ 0). Transactions
// that change state without consuming must neither be offered in/0 nor
// commit the time as its offset. Then two records arrive, are consumed and
// committed (offset 2), and from then on in/0's changes commit, fenced at 2.
func TestPlaceholderRebuildFromTime(t *testing.T) {
	from := time.Now().Add(-time.Second).UnixMilli()
	start := kgo.NewOffset().AfterMilli(from)
	r := newPlaceholderRig(t, 0, &start, false)
	r.h.set(func(h *touchHandler) { h.touching = true })
	r.waitFor("5 transactions with in/0 assigned and verified", func() bool {
		rounds, _, _, _, _, _ := r.h.snapshot()
		return rounds >= 5
	})
	r.checkNothingCommitted(kgo.EpochOffset{Epoch: -1, Offset: from})
	r.produce(2)
	r.checkFencedAt(2)
}
