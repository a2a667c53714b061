package state

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// TestNoWALCrashLeavesAPrefix is the crash-safety of a store without a WAL
// (Options.NoWAL): what a crash leaves on disk is a prefix of the commits –
// the state of every commit up to the changelog position it records and
// nothing after – whatever share of the unsynced writes the disk kept, so
// the restore from that position (docs/design.md#behind-kafka) rebuilds the
// rest. With the WAL, every commit survives (the control).
func TestNoWALCrashLeavesAPrefix(t *testing.T) {
	const commits, flushedAt = 50, 20
	for _, tc := range []struct {
		name     string
		noWAL    bool
		unsynced int // the share of unsynced writes the crash keeps, %
		want     int64
	}{
		{"wal", false, 0, commits},
		{"nowal", true, 0, flushedAt},
		{"nowal-torn", true, 50, flushedAt},
		{"nowal-all-unsynced-kept", true, 100, flushedAt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			s, err := Open("db", Options{FS: fs, NoWAL: tc.noWAL})
			if err != nil {
				t.Fatal(err)
			}
			task := Task{Topic: "in", Partition: 0}
			key := func(s string) []byte { return append(task.Prefix(), s...) }
			for i := 1; i <= commits; i++ {
				txn := s.NewTxn()
				txn.Set(key(fmt.Sprintf("mark-%02d", i)), []byte{1})
				txn.Set(key("agg"), []byte(fmt.Sprint(i)))
				txn.SetChangelogOffset(task, int64(i))
				if err := txn.Commit(); err != nil {
					t.Fatal(err)
				}
				if i == flushedAt {
					if err := s.db.Flush(); err != nil { // as Pebble does when a memtable fills
						t.Fatal(err)
					}
				}
			}
			crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: tc.unsynced, RNG: rand.New(rand.NewPCG(1, 2))})
			r := reopenCrashed(t, s, crashed, tc.noWAL)
			next := position(t, r, task)
			if next != tc.want {
				t.Fatalf("after the crash the store says it reflects the changelog up to %d, want %d", next, tc.want)
			}
			// Exactly the commits up to next: none lost, none from after.
			for i := 1; i <= commits; i++ {
				_, ok, err := r.Get(key(fmt.Sprintf("mark-%02d", i)))
				if err != nil || ok != (int64(i) <= next) {
					t.Fatalf("commit %d's write present=%v (%v), position %d", i, ok, err, next)
				}
			}
			if v, ok, err := r.Get(key("agg")); err != nil || !ok || string(v) != fmt.Sprint(next) {
				t.Fatalf("agg = %q (%v, %v), want the value of commit %d", v, ok, err, next)
			}
		})
	}
}

// TestNoWALCloseFlushes: a store without a WAL keeps every commit across a
// clean Close, which flushes the memtables first.
func TestNoWALCloseFlushes(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("db", Options{FS: fs, NoWAL: true})
	if err != nil {
		t.Fatal(err)
	}
	task := Task{Topic: "in", Partition: 3}
	commitAt(t, s, task, "k", 7)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if next := position(t, reopen(t, fs, true), task); next != 7 {
		t.Fatalf("position after a clean close: %d, want 7", next)
	}
}

// TestNoWALFlushesPeriodically: without a WAL, a commit that finds the last
// flush Options.FlushEvery ago starts one, so a crash afterwards loses
// nothing committed before it; commits within the interval start none.
func TestNoWALFlushesPeriodically(t *testing.T) {
	fs := vfs.NewCrashableMem()
	clock := time.Unix(1_000_000, 0)
	s, err := Open("db", Options{FS: fs, NoWAL: true, FlushEvery: time.Second, Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	task := Task{Topic: "in", Partition: 0}
	commit := func(next int64) {
		t.Helper()
		commitAt(t, s, task, fmt.Sprint(next), next)
	}
	commit(1)
	clock = clock.Add(500 * time.Millisecond)
	commit(2)
	if s.flushDone != nil {
		t.Fatal("a commit within FlushEvery of the last flush started one")
	}
	clock = clock.Add(600 * time.Millisecond)
	commit(3) // 1.1 s after the open: flushes commits 1-3
	if s.flushDone == nil {
		t.Fatal("a commit FlushEvery after the last flush started none")
	}
	<-s.flushDone
	commit(4) // in the memtable only
	r := reopenCrashed(t, s, fs.CrashClone(vfs.CrashCloneCfg{}), true)
	if next := position(t, r, task); next != 3 {
		t.Fatalf("after a crash the store reflects the changelog up to %d, want 3: the periodic flush", next)
	}
}

// TestNoWALCrashDuringFlush: a crash while Pebble flushes – when the flush
// has created its table, and when it has installed it – with half of the
// unsynced writes kept (a torn disk) leaves a prefix of the commits with the
// position of that prefix: the commits of the last flush that completed, or
// of the one under way, never a mix.
func TestNoWALCrashDuringFlush(t *testing.T) {
	for _, at := range []string{"table-created", "flush-end"} {
		for seed := range uint64(5) {
			t.Run(fmt.Sprintf("%s/%d", at, seed), func(t *testing.T) {
				fs := vfs.NewCrashableMem()
				var crashed *vfs.MemFS
				var flushing bool
				take := func() {
					if flushing && crashed == nil {
						crashed = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(seed, 7))})
					}
				}
				s, err := openTuned("db", Options{FS: fs, NoWAL: true}, func(o *pebble.Options) {
					o.EventListener = &pebble.EventListener{
						TableCreated: func(pebble.TableCreateInfo) {
							if at == "table-created" {
								take()
							}
						},
						FlushEnd: func(pebble.FlushInfo) {
							if at == "flush-end" {
								take()
							}
						},
					}
				})
				if err != nil {
					t.Fatal(err)
				}
				task := Task{Topic: "in", Partition: 0}
				key := func(i int) []byte { return append(task.Prefix(), fmt.Sprintf("mark-%02d", i)...) }
				const commits, flushedAt = 40, 10
				for i := 1; i <= commits; i++ {
					txn := s.NewTxn()
					txn.Set(key(i), []byte{1})
					txn.Set(append(task.Prefix(), "agg"...), []byte(fmt.Sprint(i)))
					txn.SetChangelogOffset(task, int64(i))
					if err := txn.Commit(); err != nil {
						t.Fatal(err)
					}
					if i == flushedAt || i == 30 {
						flushing = i == 30 // the crash strikes the second flush
						if err := s.db.Flush(); err != nil {
							t.Fatal(err)
						}
					}
				}
				if crashed == nil {
					t.Fatalf("the crash never struck (%s)", at)
				}
				r := reopenCrashed(t, s, crashed, true)
				next := position(t, r, task)
				if next != flushedAt && next != 30 {
					t.Fatalf("position after a crash during a flush: %d, want %d or 30", next, flushedAt)
				}
				for i := 1; i <= commits; i++ {
					if _, ok, err := r.Get(key(i)); err != nil || ok != (int64(i) <= next) {
						t.Fatalf("commit %d's write present=%v (%v) at position %d", i, ok, err, next)
					}
				}
				if v, ok, err := r.Get(append(task.Prefix(), "agg"...)); err != nil || !ok || string(v) != fmt.Sprint(next) {
					t.Fatalf("agg = %q (%v, %v), want commit %d's", v, ok, err, next)
				}
				t.Logf("%s: the store came back at position %d", at, next)
			})
		}
	}
}

// reopenCrashed drops s as a crashed process leaves it (no flush: Close of a
// broken store) and opens the store on crashed, the disk the crash left (a
// CrashClone of s's filesystem); the test closes it.
func reopenCrashed(t *testing.T, s *Store, crashed vfs.FS, noWAL bool) *Store {
	t.Helper()
	s.Abandon()
	return reopen(t, crashed, noWAL)
}

// reopen opens the store on fs again; the test closes it.
func reopen(t *testing.T, fs vfs.FS, noWAL bool) *Store {
	t.Helper()
	r, err := Open("db", Options{FS: fs, NoWAL: noWAL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// commitAt commits key (under task's prefix) with task's changelog
// position next in one transaction.
func commitAt(t *testing.T, s *Store, task Task, key string, next int64) {
	t.Helper()
	txn := s.NewTxn()
	txn.Set(append(task.Prefix(), key...), []byte(fmt.Sprint(next)))
	txn.SetChangelogOffset(task, next)
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
}

// position is the changelog offset the store says task reflects.
func position(t *testing.T, s *Store, task Task) int64 {
	t.Helper()
	next, err := s.ChangelogOffset(task)
	if err != nil {
		t.Fatal(err)
	}
	return next
}

// TestNoWALBackgroundErrorStopsEveryWrite: once a background flush failed,
// a store without a WAL refuses every write path – a commit, a restore, a
// reset – with ErrFatal naming the cause, so that neither the loop nor a
// restore keeps filling memtables that will never flush.
func TestNoWALBackgroundErrorStopsEveryWrite(t *testing.T) {
	s, err := Open("db", Options{FS: vfs.NewMem(), NoWAL: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	task := Task{Topic: "in", Partition: 0}
	s.failBackground(errors.New("creating object 000007: no space left on device"))
	txn := s.NewTxn()
	txn.Set(append(task.Prefix(), 'k'), []byte("v"))
	txn.SetChangelogOffset(task, 1)
	for what, err := range map[string]error{
		"commit":  txn.Commit(),
		"restore": s.Restore(task, []Record{{Key: []byte("k"), Value: []byte("v")}}, 1),
		"reset":   s.Reset(task),
	} {
		if !errors.Is(err, ErrFatal) || !strings.Contains(err.Error(), "no space left on device") {
			t.Errorf("%s after a failed background flush: %v, want ErrFatal naming the cause", what, err)
		}
	}
	if err := s.Close(); !errors.Is(err, ErrFatal) || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("Close after a failed background flush: %v, want ErrFatal naming the cause", err)
	}
}

// TestNoWALCloseOnAFullDisk: Close of a store without a WAL flushes its
// memtables; when that flush fails (the disk is full) it reports the cause
// as ErrFatal and returns, instead of waiting on Pebble's endless retries –
// a worker told to stop on a full disk stops. The commit the flush carried
// is not on disk (the changelog restores it: docs/design.md#behind-kafka);
// the one flushed before is.
func TestNoWALCloseOnAFullDisk(t *testing.T) {
	var full atomic.Bool
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if full.Load() && op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
			return syscall.ENOSPC
		}
		return nil
	}))
	s, err := Open("db", Options{FS: fs, NoWAL: true})
	if err != nil {
		t.Fatal(err)
	}
	task := Task{Topic: "in", Partition: 0}
	commitAt(t, s, task, "k", 1)
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	commitAt(t, s, task, "k", 2)
	full.Store(true)
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if !errors.Is(err, ErrFatal) || !strings.Contains(err.Error(), "no space left on device") {
			t.Fatalf("Close on a full disk: %v, want ErrFatal naming the cause", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close on a full disk did not return within 20s")
	}
	full.Store(false)
	if next := position(t, reopen(t, fs, true), task); next != 1 {
		t.Fatalf("position after the failed close: %d, want 1 (the last flushed)", next)
	}
}
