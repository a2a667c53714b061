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
// entries stay until SweepLocal deletes them. SweepLocal deletes, without a
// changelog record, every epoch whose entries have all expired (a range
// deletion each) and every expired segment entry of the earlier layout (a
// bounded chunk at a time); it leaves the segment markers (only the owner
// may tombstone them), the expired entry of the pre-segment layout (the
// owner tombstones it) and every live entry.
func TestSweepLocalStandby(t *testing.T) {
	d := dedup.NewStore(time.Hour)
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	old := now.Add(-2 * time.Hour)
	owner := store(t)
	segA := markAll(t, owner, d, 0, 5, old)                  // e0…e4, tombstoned by the owner
	segB := markAll(t, owner, d, 5, 5, old.Add(time.Minute)) // e5…e9, expired, not tombstoned yet
	segC := markAll(t, owner, d, 10, 5, now)                 // e10…e14, live
	entry := func(name string, at time.Time) record {
		id := dedup.MakeID("", name)
		return record{append([]byte{dedup.Kind}, id[:]...), binary.BigEndian.AppendUint64(make([]byte, 32), uint64(at.UnixMilli()))}
	}

	standby := store(t)
	restore(t, standby, d, append(append(segA, segB...), entry("old", old)), old.Add(2*time.Minute))
	restore(t, standby, d, append(segC, entry("new", now)), now)
	restore(t, standby, d, []record{{segA[0].key, nil}}, now) // the owner's sweep tombstoned A
	// Segment entries an earlier version restored under the id alone, as
	// local writes one byte longer: four expired, one live.
	txn := standby.NewTxn()
	for i, at := range []time.Time{old, old, old, old, now} {
		r := entry(fmt.Sprint("seg-", i), at)
		txn.SetLocal(append(append([]byte(nil), prefix...), r.key...), append(r.val, 1))
	}
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	count := func(kind byte) (n int) {
		if err := standby.Scan(append(append([]byte(nil), prefix...), kind), func(_, _ []byte) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if e, l := count(dedup.EpochKind), count(dedup.Kind); e != 15 || l != 2+5 {
		t.Fatalf("standby holds %d entries and %d of the earlier layouts before SweepLocal, want 15 (A's stay after its tombstone) and 7", e, l)
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
		if n > 3+1 {
			t.Fatalf("a chunk of 3 made %d deletions", n)
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
	// A's and B's entries share an epoch (8:00–8:07:30): one range deletion.
	if deleted != 4+1 || chunks < 3 {
		t.Fatalf("made %d deletions in %d chunks, want the 4 expired old-layout segment entries and A's and B's epoch, in chunks of at most 3", deleted, chunks)
	}
	if e, l := count(dedup.EpochKind), count(dedup.Kind); e != 5 || l != 2+1 {
		t.Fatalf("after SweepLocal: %d entries and %d of the earlier layouts, want C's 5 and 3 (both pre-segment ones and the live segment one)", e, l)
	}
	for _, r := range []record{segB[0], segC[0], entry("old", old)} {
		if _, ok, _ := standby.Get(append(append([]byte(nil), prefix...), r.key...)); !ok {
			t.Fatalf("SweepLocal deleted %x (a segment marker or a pre-segment entry)", r.key)
		}
	}
	p, err := d.PartitionRead(standby.Scan, prefix)
	if err != nil {
		t.Fatal(err)
	}
	for i := 10; i < 15; i++ {
		if v, _ := p.Check(standby.NewTxn(), dedup.MakeID("", fmt.Sprint("e", i)), [32]byte{byte(i)}, now); v != dedup.Duplicate {
			t.Fatalf("live entry e%d: %s after SweepLocal, want duplicate", i, v)
		}
	}
	for _, name := range []string{"new", "seg-4"} {
		if v, _ := p.Check(standby.NewTxn(), dedup.MakeID("", name), [32]byte{}, now); v != dedup.Duplicate {
			t.Fatalf("live entry %s of the earlier layouts: %s after SweepLocal, want duplicate", name, v)
		}
	}
}
