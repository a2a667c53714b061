package dedup_test

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/projector-dev/projector/dedup"
)

// TestSweepLocalStandby: a standby replica's store (docs/decisions/017)
// restores the owner's segments and then the tombstone the owner's sweep
// gives one of them, which names the segment's marker only: the segment's
// entries stay until SweepLocal deletes them. SweepLocal deletes every
// expired segment entry, a bounded chunk at a time, without a changelog
// record; it leaves the segment markers (only the owner may tombstone them),
// the expired entry of the pre-segment layout (the owner tombstones it) and
// every live entry.
func TestSweepLocalStandby(t *testing.T) {
	d := dedup.NewStore(time.Hour)
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	old := now.Add(-2 * time.Hour)
	owner := store(t)
	segA := markAll(t, owner, d, 0, 5, old)                  // e0…e4, tombstoned by the owner
	segB := markAll(t, owner, d, 5, 5, old.Add(time.Minute)) // e5…e9, expired, not tombstoned yet
	segC := markAll(t, owner, d, 10, 5, now)                 // e10…e14, live
	legacy := func(name string, at time.Time) record {
		id := dedup.MakeID("", name)
		return record{append([]byte{dedup.Kind}, id[:]...), binary.BigEndian.AppendUint64(make([]byte, 32), uint64(at.UnixMilli()))}
	}

	standby := store(t)
	restore(t, standby, d, append(append(segA, segB...), legacy("old", old)), old.Add(2*time.Minute))
	restore(t, standby, d, append(segC, legacy("new", now)), now)
	restore(t, standby, d, []record{{segA[0].key, nil}}, now) // the owner's sweep tombstoned A
	entries := func() (n int) {
		if err := standby.Scan(dedup.Prefix(prefix), func(_, _ []byte) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := entries(); n != 15+2 {
		t.Fatalf("standby holds %d entries before SweepLocal, want 17 (A's stay after its tombstone)", n)
	}

	var from []byte
	deleted, chunks := 0, 0
	for {
		txn := standby.NewTxn()
		next, n, err := d.SweepLocal(txn, prefix, from, now, 3)
		if err != nil {
			t.Fatal(err)
		}
		if recs := changelog(txn); len(recs) != 0 {
			t.Fatalf("SweepLocal staged %d changelog records, want none", len(recs))
		}
		if n > 3 {
			t.Fatalf("a chunk of 3 deleted %d", n)
		}
		if err := txn.Commit(); err != nil {
			t.Fatal(err)
		}
		deleted += n
		chunks++
		if next == nil {
			break
		}
		if chunks > 30 {
			t.Fatal("SweepLocal does not finish")
		}
		from = next
	}
	if deleted != 10 || chunks < 4 {
		t.Fatalf("deleted %d in %d chunks, want A's and B's 10 entries in chunks of at most 3", deleted, chunks)
	}
	for i := range 10 {
		id := dedup.MakeID("", fmt.Sprint("e", i))
		k := append(dedup.Prefix(prefix), id[:]...)
		if _, ok, _ := standby.Get(k); ok {
			t.Fatalf("expired segment entry e%d survived SweepLocal", i)
		}
	}
	for _, r := range []record{segB[0], segC[0], legacy("old", old)} {
		if _, ok, _ := standby.Get(append(append([]byte(nil), prefix...), r.key...)); !ok {
			t.Fatalf("SweepLocal deleted %x (a segment marker or a pre-segment entry)", r.key)
		}
	}
	for i := 10; i < 15; i++ {
		if v, _ := d.PartitionOver(prefix, nil, nil).Check(standby.NewTxn(), dedup.MakeID("", fmt.Sprint("e", i)), [32]byte{byte(i)}, now); v != dedup.Duplicate {
			t.Fatalf("live entry e%d: %s after SweepLocal, want duplicate", i, v)
		}
	}
	if v, _ := d.PartitionOver(prefix, nil, nil).Check(standby.NewTxn(), dedup.MakeID("", "new"), [32]byte{}, now); v != dedup.Duplicate {
		t.Fatalf("live pre-segment entry: %s after SweepLocal, want duplicate", v)
	}
}
