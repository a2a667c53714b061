package eos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/changelog"
	"github.com/projector-dev/projector/internal/core/state"
)

// parallelFixture is a changelog topic of parts partitions, each holding
// keys "p<partition>-k<i>" written twice (the second value wins) and a
// tombstone for k0, and a store to restore them into.
type parallelFixture struct {
	cl    *kgo.Client
	st    *state.Store
	tasks []state.Task
}

const (
	parallelParts = 4
	parallelKeys  = 300
)

func newParallelFixture(t *testing.T, ctx context.Context) *parallelFixture {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(parallelParts, "in.changelog"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.DefaultProduceTopic("in.changelog"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	f := &parallelFixture{cl: cl}
	for p := range int32(parallelParts) {
		f.tasks = append(f.tasks, state.Task{Topic: "in", Partition: p})
		for round := range 2 {
			for i := range parallelKeys {
				k := fmt.Appendf(nil, "p%d-k%d", p, i)
				cl.Produce(ctx, &kgo.Record{Partition: p, Key: k, Value: fmt.Appendf(nil, "v%d", round)}, nil)
			}
		}
		cl.Produce(ctx, &kgo.Record{Partition: p, Key: fmt.Appendf(nil, "p%d-k0", p)}, nil) // tombstone
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	f.st, err = state.Open("mem", state.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.st.Close() })
	return f
}

// records is each partition's changelog length.
const parallelRecords = 2*parallelKeys + 1

// parallelHandler counts Restored calls per task and how many ran at once.
type parallelHandler struct {
	mu          sync.Mutex
	restored    map[state.Task]int
	verified    map[state.Task]bool
	inside, max atomic.Int32
}

type parallelTask struct {
	h *parallelHandler
	t *Task
}

func (pt *parallelTask) Restored() error {
	if n := pt.h.inside.Add(1); n > pt.h.max.Load() {
		pt.h.max.Store(n)
	}
	defer pt.h.inside.Add(-1)
	pt.h.mu.Lock()
	defer pt.h.mu.Unlock()
	pt.h.restored[pt.t.ID]++
	pt.h.verified[pt.t.ID] = pt.t.Verified()
	return nil
}
func (pt *parallelTask) Revoked()                          {}
func (pt *parallelTask) Process(*Batch, *kgo.Record) error { return nil }
func (pt *parallelTask) Stage(*Batch)                      {}

// TestRestoreReadsTasksConcurrently: with restorer.parallel above one, the
// tasks of one restore read their changelog partitions at the same time,
// into one store: every partition's
// first record is held in Config.Restore until each of the others has
// reached its own first record, which a restore of one task after another
// never does. Each task ends with exactly its changelog's state (the later
// value of a key wins, a tombstone deletes), its offset, its record count;
// Restored is called once per task, verified, never two at once.
func TestRestoreReadsTasksConcurrently(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := newParallelFixture(t, ctx)
	var arrived sync.WaitGroup
	arrived.Add(parallelParts)
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	var first sync.Map
	var apart atomic.Bool
	expand := func(key, value []byte, _ time.Time, emit func(k, v []byte)) error {
		if _, seen := first.LoadOrStore(string(key[:2]), true); !seen {
			arrived.Done()
			select {
			case <-all:
			case <-time.After(10 * time.Second):
				apart.Store(true) // another task never started meanwhile
			}
		}
		emit(key, value)
		return nil
	}
	l := New[TaskHandler](Config{Session: Session{Store: f.st}, Restore: expand,
		ChangelogOf: func(in string) string { return in + ".changelog" }}, nil)
	h := &parallelHandler{restored: map[state.Task]int{}, verified: map[state.Task]bool{}}
	var ts []*Task
	for _, id := range f.tasks {
		tk := &Task{ID: id, Prefix: id.Prefix()}
		tk.h = &parallelTask{h: h, t: tk}
		ts = append(ts, tk)
	}
	r := l.newRestorer(f.cl)
	r.parallel = parallelParts
	if err := r.restore(ctx, ts, true); err != nil {
		t.Fatal(err)
	}
	if apart.Load() {
		t.Fatal("a task's read did not start while another's was under way: the tasks were restored one after another")
	}
	for _, tk := range ts {
		id := tk.ID
		if tk.RestoredRecords != parallelRecords {
			t.Errorf("%s: RestoredRecords %d, want %d", id, tk.RestoredRecords, parallelRecords)
		}
		if off, err := f.st.ChangelogOffset(id); err != nil || off != parallelRecords {
			t.Errorf("%s: stored offset %d (%v), want %d", id, off, err, parallelRecords)
		}
		if h.restored[id] != 1 || !h.verified[id] || !tk.verified {
			t.Errorf("%s: Restored called %d times (verified %v, task verified %v), want once, verified", id, h.restored[id], h.verified[id], tk.verified)
		}
		for i := range parallelKeys {
			v, ok, err := f.st.Get(append(id.Prefix(), fmt.Sprintf("p%d-k%d", id.Partition, i)...))
			if err != nil || (i == 0) == ok || (i > 0 && string(v) != "v1") {
				t.Fatalf("%s: key k%d: %q present %v (%v); want deleted for k0, v1 for the others", id, i, v, ok, err)
			}
		}
	}
	if got, want := l.stats.Restored(), int64(parallelParts*parallelRecords); got != want {
		t.Errorf("restored-records counter %d, want %d", got, want)
	}
	if h.max.Load() != 1 {
		t.Errorf("%d Restored calls ran at once, want 1", h.max.Load())
	}
}

// TestRestoreStopsEveryTaskOnAnError: a corrupt record in one task's
// changelog fails the restore with that task's CorruptError, not with the
// cancellation it causes in the others; the failed task is not handed to
// Restored, and its stored offset is not past the corrupt record.
func TestRestoreStopsEveryTaskOnAnError(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := newParallelFixture(t, ctx)
	bad := f.tasks[2]
	expand := func(key, value []byte, _ time.Time, emit func(k, v []byte)) error {
		if string(key) == fmt.Sprintf("p%d-k7", bad.Partition) {
			return errors.New("corrupt")
		}
		emit(key, value)
		return nil
	}
	l := New[TaskHandler](Config{Session: Session{Store: f.st}, Restore: expand,
		ChangelogOf: func(in string) string { return in + ".changelog" }}, nil)
	h := &parallelHandler{restored: map[state.Task]int{}, verified: map[state.Task]bool{}}
	var ts []*Task
	for _, id := range f.tasks {
		tk := &Task{ID: id, Prefix: id.Prefix()}
		tk.h = &parallelTask{h: h, t: tk}
		ts = append(ts, tk)
	}
	err := l.newRestorer(f.cl).restore(ctx, ts, false)
	var ce *changelog.CorruptError
	if !errors.As(err, &ce) || ce.Task != bad.String() || ce.Offset != 7 {
		t.Fatalf("restore error %v, want the corrupt record of %s at offset 7", err, bad)
	}
	if h.restored[bad] != 0 {
		t.Fatalf("the failed task was handed to Restored")
	}
	if off, _ := f.st.ChangelogOffset(bad); off > 7 {
		t.Fatalf("%s: stored offset %d, past the corrupt record at 7", bad, off)
	}
}

// TestWorseRestoreErr: an error that stops the loop wins over a transient
// one and over a cancellation, whichever came first.
func TestWorseRestoreErr(t *testing.T) {
	transient := &transientError{errors.New("broker")}
	fatal := errors.New("fenced")
	for _, c := range []struct{ old, err, want error }{
		{nil, transient, transient},
		{transient, fatal, fatal},
		{context.Canceled, fatal, fatal},
		{fatal, transient, fatal},
		{fatal, context.Canceled, fatal},
		{transient, context.Canceled, transient},
	} {
		if got := worseRestoreErr(c.old, c.err); got != c.want {
			t.Errorf("worseRestoreErr(%v, %v) = %v, want %v", c.old, c.err, got, c.want)
		}
	}
}

// overlapTask is a TaskHandler whose first Restored call waits until the
// restore reads the changelog of a task not read before it.
type overlapTask struct {
	*parallelTask
	first   *sync.Once
	newRead func() <-chan struct{} // closes once another task's read began
	apart   *atomic.Bool
}

func (o *overlapTask) Restored() error {
	o.first.Do(func() {
		select {
		case <-o.newRead():
		case <-time.After(10 * time.Second):
			o.apart.Store(true)
		}
	})
	return o.parallelTask.Restored()
}

// TestRestoreOverlapsRestoredWithTheNextRead: by default the tasks are read
// one at a time (restoreParallel), and a task's Restored runs while the
// next task's read goes on: the first Restored call waits until a record of
// a task not read before it arrives, which a restore that calls Restored
// between the reads never delivers. Every task still ends with exactly its
// changelog's state and one verified Restored call, never two at once.
func TestRestoreOverlapsRestoredWithTheNextRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := newParallelFixture(t, ctx)
	var mu sync.Mutex
	seen := map[string]bool{}
	var watch map[string]bool // the tasks read when the first Restored began
	var newRead chan struct{}
	expand := func(key, value []byte, _ time.Time, emit func(k, v []byte)) error {
		mu.Lock()
		p := string(key[:2])
		seen[p] = true
		if watch != nil && !watch[p] {
			close(newRead)
			watch = nil
		}
		mu.Unlock()
		emit(key, value)
		return nil
	}
	begin := func() <-chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		watch = maps.Clone(seen)
		newRead = make(chan struct{})
		return newRead
	}
	l := New[TaskHandler](Config{Session: Session{Store: f.st}, Restore: expand,
		ChangelogOf: func(in string) string { return in + ".changelog" }}, nil)
	h := &parallelHandler{restored: map[state.Task]int{}, verified: map[state.Task]bool{}}
	var once sync.Once
	var apart atomic.Bool
	var ts []*Task
	for _, id := range f.tasks {
		tk := &Task{ID: id, Prefix: id.Prefix()}
		tk.h = &overlapTask{parallelTask: &parallelTask{h: h, t: tk}, first: &once, newRead: begin, apart: &apart}
		ts = append(ts, tk)
	}
	if err := l.newRestorer(f.cl).restore(ctx, ts, true); err != nil {
		t.Fatal(err)
	}
	if apart.Load() {
		t.Fatal("no other task's read went on while the first task's Restored ran")
	}
	for _, tk := range ts {
		id := tk.ID
		if off, err := f.st.ChangelogOffset(id); err != nil || off != parallelRecords || tk.RestoredRecords != parallelRecords {
			t.Errorf("%s: stored offset %d (%v), %d records restored; want %d", id, off, err, tk.RestoredRecords, parallelRecords)
		}
		if h.restored[id] != 1 || !h.verified[id] {
			t.Errorf("%s: Restored called %d times (verified %v), want once, verified", id, h.restored[id], h.verified[id])
		}
		if v, ok, err := f.st.Get(append(id.Prefix(), fmt.Sprintf("p%d-k%d", id.Partition, parallelKeys-1)...)); err != nil || !ok || string(v) != "v1" {
			t.Errorf("%s: last key %q %v (%v), want v1", id, v, ok, err)
		}
	}
	if h.max.Load() != 1 {
		t.Errorf("%d Restored calls ran at once, want 1", h.max.Load())
	}
}
