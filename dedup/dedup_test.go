package dedup_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/state"
)

func store(t *testing.T) *state.Store {
	t.Helper()
	st, err := state.Open("mem", state.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

var prefix = state.Task{Topic: "in", Partition: 3}.Prefix()

// TestVerdicts: new, duplicate (same fingerprint), conflict (another), and
// tenant scoping.
func TestVerdicts(t *testing.T) {
	st := store(t)
	d := dedup.NewStore(time.Hour)
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	txn := st.NewTxn()
	fp1, fp2 := [32]byte{1}, [32]byte{2}
	id := dedup.MakeID("", "e1")
	check := func(id dedup.ID, fp [32]byte, at time.Time, want dedup.Verdict) {
		t.Helper()
		got, err := d.Check(txn, nil, prefix, id, fp, at)
		if err != nil || got != want {
			t.Fatalf("got %s (%v), want %s", got, err, want)
		}
	}
	check(id, fp1, now, dedup.New)
	d.Mark(txn, nil, prefix, id, fp1, now)
	check(id, fp1, now, dedup.Duplicate)
	check(id, fp2, now, dedup.Conflict)
	check(dedup.MakeID("tenant-a", "e1"), fp2, now, dedup.New) // another tenant's e1
	// Remembered for the whole retention, across buckets.
	check(id, fp1, now.Add(59*time.Minute), dedup.Duplicate)
	check(id, fp1, now.Add(time.Hour), dedup.Duplicate)
	// Forgotten once older than the retention.
	check(id, fp1, now.Add(time.Hour+time.Millisecond), dedup.New)
	// A clock that stepped back still finds it.
	check(id, fp1, now.Add(-time.Minute), dedup.Duplicate)
}

// TestAbortedMarkLeavesNothing: a mark staged in a transaction that is never
// committed does not exist (invariant 1).
func TestAbortedMarkLeavesNothing(t *testing.T) {
	st := store(t)
	d := dedup.NewStore(time.Hour)
	now := time.Now()
	id := dedup.MakeID("", "e1")
	aborted := st.NewTxn()
	d.Mark(aborted, nil, prefix, id, [32]byte{1}, now)
	fresh := st.NewTxn()
	if v, _ := d.Check(fresh, nil, prefix, id, [32]byte{1}, now); v != dedup.New {
		t.Fatalf("verdict %s after an uncommitted mark, want new", v)
	}
	committed := st.NewTxn()
	d.Mark(committed, nil, prefix, id, [32]byte{1}, now)
	if err := committed.Commit(); err != nil {
		t.Fatal(err)
	}
	if v, _ := d.Check(st.NewTxn(), nil, prefix, id, [32]byte{1}, now); v != dedup.Duplicate {
		t.Fatalf("verdict %s after a committed mark, want duplicate", v)
	}
}

// TestExpired: changelog records of expired entries are recognised for restore.
func TestExpired(t *testing.T) {
	d := dedup.NewStore(time.Hour)
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	st := store(t)
	txn := st.NewTxn()
	d.Mark(txn, nil, prefix, dedup.MakeID("", "old"), [32]byte{1}, now)
	var key, val []byte
	txn.Each(func(k string, v []byte) { key, val = []byte(k)[len(prefix):], v })
	if d.Expired(key, val, now.Add(30*time.Minute)) {
		t.Fatal("expired inside the window")
	}
	if !d.Expired(key, val, now.Add(2*time.Hour)) {
		t.Fatal("not expired after the window")
	}
	if d.Expired([]byte("a-not-dedup"), val, now.Add(100*time.Hour)) {
		t.Fatal("a non-dedup key is never expired")
	}
}

// TestSweepDeletesExpiredInChunks: the sweep deletes exactly the expired
// entries, through the transaction (so as changelog tombstones), a bounded
// chunk at a time, and waits retention/8 before the next pass.
func TestSweepDeletesExpiredInChunks(t *testing.T) {
	d := dedup.NewStore(time.Hour)
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	st := store(t)
	txn := st.NewTxn()
	for i := 0; i < 25; i++ {
		at := now.Add(-2 * time.Hour) // expired
		if i%5 == 0 {
			at = now // live
		}
		d.Mark(txn, nil, prefix, dedup.MakeID("", fmt.Sprint("e", i)), [32]byte{byte(i)}, at)
	}
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	var sw dedup.Sweeper
	total, chunks := 0, 0
	for {
		txn := st.NewTxn()
		n, err := d.Sweep(&sw, txn, prefix, now, 7)
		if err != nil {
			t.Fatal(err)
		}
		deletions := 0
		txn.Each(func(_ string, v []byte) {
			if v == nil {
				deletions++
			}
		})
		if deletions != n {
			t.Fatalf("sweep reported %d deletions, staged %d", n, deletions)
		}
		if err := txn.Commit(); err != nil {
			t.Fatal(err)
		}
		total += n
		chunks++
		if n == 0 && chunks > 1 {
			break
		}
		if chunks > 10 {
			t.Fatal("sweep does not finish")
		}
	}
	if total != 20 {
		t.Fatalf("deleted %d, want the 20 expired", total)
	}
	if n, _ := d.Sweep(&sw, st.NewTxn(), prefix, now.Add(time.Minute), 7); n != 0 {
		t.Fatal("a new pass started before retention/8")
	}
	for i := 0; i < 25; i += 5 {
		if v, _ := d.Check(st.NewTxn(), nil, prefix, dedup.MakeID("", fmt.Sprint("e", i)), [32]byte{byte(i)}, now); v != dedup.Duplicate {
			t.Fatalf("live entry e%d was swept", i)
		}
	}
}
