package state

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
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
			s.broken.Store(true) // the process is gone: Close must not flush
			_ = s.Close()

			r, err := Open("db", Options{FS: crashed, NoWAL: tc.noWAL})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			next, err := r.ChangelogOffset(task)
			if err != nil {
				t.Fatal(err)
			}
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
	txn := s.NewTxn()
	txn.Set(append(task.Prefix(), 'k'), []byte("v"))
	txn.SetChangelogOffset(task, 7)
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := Open("db", Options{FS: fs, NoWAL: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if next, err := r.ChangelogOffset(task); err != nil || next != 7 {
		t.Fatalf("position after a clean close: %d (%v), want 7", next, err)
	}
}
