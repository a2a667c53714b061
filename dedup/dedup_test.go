package dedup_test

import (
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
		got, err := d.Check(txn, prefix, id, fp, at)
		if err != nil || got != want {
			t.Fatalf("got %s (%v), want %s", got, err, want)
		}
	}
	check(id, fp1, now, dedup.New)
	d.Mark(txn, prefix, id, fp1, now)
	check(id, fp1, now, dedup.Duplicate)
	check(id, fp2, now, dedup.Conflict)
	check(dedup.MakeID("tenant-a", "e1"), fp2, now, dedup.New) // another tenant's e1
	// Remembered for the whole retention, across buckets.
	check(id, fp1, now.Add(59*time.Minute), dedup.Duplicate)
	// Forgotten once its bucket left the window (at most retention + a bucket).
	check(id, fp1, now.Add(time.Hour+time.Hour/dedup.Buckets+time.Second), dedup.New)
	// A clock that stepped back a little still finds it.
	check(id, fp1, now.Add(-time.Second), dedup.Duplicate)
}

// TestAbortedMarkLeavesNothing: a mark staged in a transaction that is never
// committed does not exist (invariant 1).
func TestAbortedMarkLeavesNothing(t *testing.T) {
	st := store(t)
	d := dedup.NewStore(time.Hour)
	now := time.Now()
	id := dedup.MakeID("", "e1")
	aborted := st.NewTxn()
	d.Mark(aborted, prefix, id, [32]byte{1}, now)
	fresh := st.NewTxn()
	if v, _ := d.Check(fresh, prefix, id, [32]byte{1}, now); v != dedup.New {
		t.Fatalf("verdict %s after an uncommitted mark, want new", v)
	}
	committed := st.NewTxn()
	d.Mark(committed, prefix, id, [32]byte{1}, now)
	if err := committed.Commit(); err != nil {
		t.Fatal(err)
	}
	if v, _ := d.Check(st.NewTxn(), prefix, id, [32]byte{1}, now); v != dedup.Duplicate {
		t.Fatalf("verdict %s after a committed mark, want duplicate", v)
	}
}

// TestExpired: changelog keys of expired buckets are recognised for restore.
func TestExpired(t *testing.T) {
	d := dedup.NewStore(time.Hour)
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	st := store(t)
	txn := st.NewTxn()
	d.Mark(txn, prefix, dedup.MakeID("", "old"), [32]byte{1}, now)
	var key []byte
	txn.Each(func(k string, _ []byte) { key = []byte(k)[len(prefix):] })
	if d.Expired(key, now.Add(30*time.Minute)) {
		t.Fatal("expired inside the window")
	}
	if !d.Expired(key, now.Add(2*time.Hour)) {
		t.Fatal("not expired after the window")
	}
	if d.Expired([]byte("a-not-dedup"), now.Add(100*time.Hour)) {
		t.Fatal("a non-dedup key is never expired")
	}
}
