package eos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/app/broker"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/harness/testkit"
)

// TestStandbyReleaseStopsWrites (docs/design.md#one-writer-per-task): the
// standby is reading task X's changelog (slowly: the broker delays every
// fetch) when the loop takes X over. Once set returns without X, the
// standby writes nothing more of X – the loop may restore and process it
// from the position it finds – and goes on with the tasks it keeps (Y is
// read to its end afterwards: the standby had its chance to write X).
func TestStandbyReleaseStopsWrites(t *testing.T) {
	const records = 20000
	r := newStandbyRig(t, nil)
	x, y := state.Task{Topic: "in", Partition: 0}, state.Task{Topic: "in", Partition: 1}
	r.produce(x, "k", records)
	r.produce(y, "k", 10)
	// A slow broker: each fetch answers after 50 ms, small, so that X's
	// read takes many of them.
	r.c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		r.c.KeepControl()
		time.Sleep(50 * time.Millisecond) // sleep ok: the fault itself, a slow broker
		return nil, nil, false
	})
	r.sb.set(map[state.Task]bool{x: true, y: true})
	testkit.Await(t, 30*time.Second, "the standby to have written part of X", func() bool { return r.position(x) > 0 })
	r.sb.set(map[state.Task]bool{y: true}) // the loop takes X over
	released := r.position(x)
	if released >= records {
		t.Fatalf("X was read to its end (%d) before the hand-over: the test proves nothing", released)
	}
	testkit.Await(t, 30*time.Second, "the standby to read Y to its end", func() bool { return r.position(y) == 10 })
	if got := r.position(x); got != released {
		t.Fatalf("the standby wrote X after handing it over: its position moved from %d to %d", released, got)
	}
	// Y counts as caught up once its read has returned, just after its last
	// write: wait for the count, not the position.
	testkit.Await(t, 30*time.Second, "the standby stats to show 1 task, caught up", func() bool {
		tasks, caught, _ := r.sb.r.stats.Standby()
		return tasks == 1 && caught == 1
	})
}

// standbyRig is a standby over a kfake cluster with topic "in" and its
// changelog "in.changelog" (2 partitions each), on a store in memory.
type standbyRig struct {
	t  *testing.T
	c  *kfake.Cluster
	pc *kgo.Client // produces to the changelog, partition by partition
	st *state.Store
	sb *standby
}

func newStandbyRig(t *testing.T, restore func(k, v []byte, now time.Time, emit func(k, v []byte)) error) *standbyRig {
	c, err := broker.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in", "in.changelog"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// Small batches: a fetch returns at least one whole batch however small
	// its byte limit, so with kgo's default (1 MB) a test's records could
	// all come back in one fetch and no read would be under way long enough
	// to be interrupted (without -race they did).
	pc, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic("in.changelog"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(4096))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pc.Close)
	st, err := state.Open("mem", state.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := &Config{Session: Session{Store: st, Logger: slog.New(slog.DiscardHandler), Now: time.Now,
		TransactionTimeout: 10 * time.Second}, ChangelogOf: func(in string) string { return in + ".changelog" },
		Restore: restore}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.FetchMaxPartitionBytes(4096))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	r := &standbyRig{t: t, c: c, pc: pc, st: st, sb: newStandby(&restorer{cfg: cfg, stats: NewStats(), cl: cl, standby: true})}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.sb.run(ctx)
	}()
	t.Cleanup(func() { stop(); <-done })
	return r
}

// produce writes n records keyed prefix<i> to the changelog partition of id.
func (r *standbyRig) produce(id state.Task, prefix string, n int) []*kgo.Record {
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Partition: id.Partition, Key: fmt.Appendf(nil, "%s%05d", prefix, i), Value: []byte("v")})
	}
	if err := r.pc.ProduceSync(context.Background(), recs...).FirstErr(); err != nil {
		r.t.Fatal(err)
	}
	return recs
}

func (r *standbyRig) position(id state.Task) int64 {
	next, err := r.st.ChangelogOffset(id)
	if err != nil {
		r.t.Fatal(err)
	}
	return next
}

// TestStandbyFailingTaskDoesNotStopOthers: a standby task whose changelog
// holds a record the restore refuses is retried on its own; the other task
// keeps being tailed and is the only one counted as caught up.
func TestStandbyFailingTaskDoesNotStopOthers(t *testing.T) {
	refuse := func(k, v []byte, _ time.Time, emit func(k, v []byte)) error {
		if string(k) == "bad00000" {
			return errors.New("a record nobody can read")
		}
		emit(k, v)
		return nil
	}
	r := newStandbyRig(t, refuse)
	x, y := state.Task{Topic: "in", Partition: 0}, state.Task{Topic: "in", Partition: 1}
	r.produce(x, "bad", 1)
	r.produce(y, "k", 5)
	r.sb.set(map[state.Task]bool{x: true, y: true})
	testkit.Await(t, 30*time.Second, "Y read to its end", func() bool { return r.position(y) == 5 })
	r.produce(y, "m", 5)
	testkit.Await(t, 30*time.Second, "Y's new records read while X keeps failing", func() bool { return r.position(y) == 10 })
	if _, caught, _ := r.sb.r.stats.Standby(); caught != 1 || r.position(x) != 0 {
		t.Fatalf("caught up %d (want 1: Y alone), X at %d (want 0: its first record refused)", caught, r.position(x))
	}
}

// TestStandbyRereadsAReturningTaskAfterListing: the loop takes X over and
// gives it back while a round, which listed X's changelog end before, reads
// another task. Meanwhile the loop wrote X past that listed end. The round
// must not read X against its old listing (the store would look ahead of the
// changelog and be reset, then read again from offset 0): the next round
// does, and finds X at its end.
func TestStandbyRereadsAReturningTaskAfterListing(t *testing.T) {
	r := newStandbyRig(t, nil)
	// Slow fetches: the round spends seconds on Y.
	r.c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		r.c.KeepControl()
		time.Sleep(20 * time.Millisecond) // sleep ok: the fault itself, a slow broker
		return nil, nil, false
	})
	y, x := state.Task{Topic: "in", Partition: 0}, state.Task{Topic: "in", Partition: 1} // Y first in a round
	r.produce(x, "x", 10)
	r.sb.set(map[state.Task]bool{x: true})
	testkit.Await(t, 30*time.Second, "X read to its end", func() bool { return r.position(x) == 10 })
	r.produce(y, "y", 20000)
	r.sb.set(map[state.Task]bool{x: true, y: true})
	testkit.Await(t, 30*time.Second, "the round reading Y", func() bool { return r.position(y) > 0 })
	// The loop takes X, writes five more of its changes (to the changelog
	// and the store), and gives it back: all while the round reads Y.
	r.sb.set(map[state.Task]bool{y: true})
	more := r.produce(x, "z", 5)
	recs := make([]state.Record, len(more))
	for i, m := range more {
		recs[i] = state.Record{Key: m.Key, Value: m.Value}
	}
	if err := r.st.Restore(x, recs, 15); err != nil {
		t.Fatal(err)
	}
	r.sb.set(map[state.Task]bool{x: true, y: true})
	if r.position(y) >= 20000 {
		t.Fatal("Y was read to its end before X came back: the test proves nothing")
	}
	testkit.Await(t, 60*time.Second, "both at their end", func() bool {
		_, caught, _ := r.sb.r.stats.Standby()
		return caught == 2 && r.position(y) == 20000 && r.position(x) == 15
	})
	if _, _, n := r.sb.r.stats.Standby(); n != 10+20000 {
		t.Fatalf("the standby wrote %d changelog records, want %d (X's 10, Y's 20000): X was read again from scratch", n, 10+20000)
	}
}

// TestUpdateStandbyHandsOverOnlyUnownedTasks: the loop hands the standby the
// tasks the group wants tailed here minus those it owns or is about to own
// (one-writer-per-task); a sync's standby list is kept until the next one,
// and dropped when an assignment arrives without one (the group balanced
// with cooperative-sticky: a member of an older version is in it).
func TestUpdateStandbyHandsOverOnlyUnownedTasks(t *testing.T) {
	l := New[*restoreTask](Config{StandbyReplicas: 1}, &restoreHandler{})
	l.sb = newStandby(&restorer{cfg: &l.cfg, stats: l.stats, standby: true})
	owned, pending := state.Task{Topic: "in", Partition: 0}, state.Task{Topic: "in", Partition: 1}
	free := state.Task{Topic: "in", Partition: 2}
	l.tasks[owned] = ownedTask[*restoreTask]{Task: &Task{ID: owned}}
	tailed := func() map[state.Task]bool {
		l.sb.mu.Lock()
		defer l.sb.mu.Unlock()
		return maps.Clone(l.sb.want)
	}

	l.onStandby([]state.Task{owned, pending, free})
	l.onAssigned(context.Background(), nil, nil) // the same sync's assignment
	if err := l.updateStandby(map[state.Task]bool{pending: true}, false); err != nil {
		t.Fatal(err)
	}
	if got := tailed(); !maps.Equal(got, map[state.Task]bool{free: true}) {
		t.Fatalf("standby tails %v, want only %v (not the owned %v nor the pending %v)", got, free, owned, pending)
	}

	l.onAssigned(context.Background(), nil, nil) // a sync without standby tasks
	if err := l.updateStandby(nil, false); err != nil {
		t.Fatal(err)
	}
	if got := tailed(); len(got) != 0 {
		t.Fatalf("standby tails %v after an assignment without standby tasks, want none", got)
	}
}

// TestUpdateStandbyWaitsForTheLastWrite (docs/design.md#one-writer-per-task):
// a task the loop gave up may still have its last transaction's Pebble write
// in flight; the standby gets the task only once that write has landed, or
// the standby's restore and the loop's write would both write its keys.
func TestUpdateStandbyWaitsForTheLastWrite(t *testing.T) {
	l := New[*restoreTask](Config{StandbyReplicas: 1}, &restoreHandler{})
	l.sb = newStandby(&restorer{cfg: &l.cfg, stats: l.stats, standby: true})
	given := state.Task{Topic: "in", Partition: 0}
	write := &inflight{done: make(chan struct{}), tx: newTxnBatches(nil, time.Now(), "", nil, nil).tx, start: time.Now()}
	l.inflight = write
	tailed := func() map[state.Task]bool {
		l.sb.mu.Lock()
		defer l.sb.mu.Unlock()
		return maps.Clone(l.sb.want)
	}

	l.onStandby([]state.Task{given})
	handed := make(chan error, 1)
	go func() { handed <- l.updateStandby(nil, true) }() // the task was just revoked
	// What is checked is an absence, so it is given a bounded time to
	// appear: without the settle, the hand-over takes microseconds.
	select {
	case err := <-handed:
		t.Fatalf("updateStandby returned (err %v) while the loop's last Pebble write was in flight; the standby tails %v", err, tailed())
	case <-time.After(300 * time.Millisecond):
	}
	if got := tailed(); len(got) != 0 {
		t.Fatalf("the standby tails %v while the loop's last Pebble write is in flight, want none yet", got)
	}

	close(write.done) // the write lands
	if err := <-handed; err != nil {
		t.Fatal(err)
	}
	if got := tailed(); !maps.Equal(got, map[state.Task]bool{given: true}) {
		t.Fatalf("the standby tails %v after the write landed, want %v", got, given)
	}
	if l.inflight != nil {
		t.Fatal("the landed write is still the loop's in-flight write: it was not finished")
	}
}

// TestPositionsReadNoStoreAfterRun: kgo asks the balancer for the store's
// positions on its own goroutine, and a leave that Run abandoned after
// closeWait can still be joining when Run's caller closes the store. Once
// Run has returned, positions must not read the store: it offers none.
func TestPositionsReadNoStoreAfterRun(t *testing.T) {
	c, err := broker.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in", "in.changelog"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := state.Open("mem", state.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	task := state.Task{Topic: "in", Partition: 0}
	txn := st.NewTxn() // the store has read the (empty) changelog before
	txn.SetChangelogOffset(task, 0)
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	stats := NewStats()
	l := New(Config{
		Group: "g", TransactionalID: "g-t1",
		Session: Session{Brokers: c.ListenAddrs(), DeadLetterTopic: "in.dlq", Partitions: 1,
			Store: st, MaxRecordsPerTxn: 100, TransactionTimeout: 10 * time.Second, SessionTimeout: 6 * time.Second},
		Inputs:          []string{"in"},
		ChangelogOf:     func(in string) string { return in + ".changelog" },
		CreateInputs:    true,
		Stats:           stats,
		StandbyReplicas: 1,
	}, &restoreHandler{restored: map[state.Task]int{}})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(runCtx) }()
	if err := stats.WaitReady(ctx); err != nil {
		t.Fatalf("not ready: %v", err)
	}
	if p := l.positions(); len(p) != 1 {
		t.Fatalf("positions while running: %v, want %s's", p, task)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if p := l.positions(); p != nil {
		t.Fatalf("positions after Run returned: %v, want none (the store may be closing)", p)
	}
}
