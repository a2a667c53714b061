package dedup_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/core/state"
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
	p := d.PartitionOver(prefix, nil, nil)
	check := func(id dedup.ID, fp [32]byte, at time.Time, want dedup.Verdict) {
		t.Helper()
		got, err := p.Check(txn, id, fp, at)
		if err != nil || got != want {
			t.Fatalf("got %s (%v), want %s", got, err, want)
		}
	}
	check(id, fp1, now, dedup.New)
	var m dedup.Marks
	p.Mark(txn, &m, 0, id, fp1, now)
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
// committed does not exist (docs/design.md#staged-writes-only).
func TestAbortedMarkLeavesNothing(t *testing.T) {
	st := store(t)
	d := dedup.NewStore(time.Hour)
	now := time.Now()
	id := dedup.MakeID("", "e1")
	p := d.PartitionOver(prefix, nil, nil)
	aborted := st.NewTxn()
	var m dedup.Marks
	p.Mark(aborted, &m, 0, id, [32]byte{1}, now)
	p.Stage(aborted, &m)
	fresh := st.NewTxn()
	if v, _ := p.Check(fresh, id, [32]byte{1}, now); v != dedup.New {
		t.Fatalf("verdict %s after an uncommitted mark, want new", v)
	}
	committed := st.NewTxn()
	p.Mark(committed, &m, 0, id, [32]byte{1}, now)
	p.Stage(committed, &m)
	if err := committed.Commit(); err != nil {
		t.Fatal(err)
	}
	if v, _ := p.Check(st.NewTxn(), id, [32]byte{1}, now); v != dedup.Duplicate {
		t.Fatalf("verdict %s after a committed mark, want duplicate", v)
	}
}

// record is one changelog record as a transaction stages it.
type record struct{ key, val []byte }

// changelog returns the records txn produces, keys without the task prefix.
func changelog(txn *state.Txn) []record {
	var out []record
	txn.Each(func(k string, v []byte) { out = append(out, record{[]byte(k)[len(prefix):], v}) })
	return out
}

// markAll marks n ids e<from>… at one time in one transaction, stages the
// segment and commits; it returns the changelog records.
func markAll(t *testing.T, st *state.Store, d *dedup.Store, from, n int, at time.Time) []record {
	t.Helper()
	txn := st.NewTxn()
	var m dedup.Marks
	for i := from; i < from+n; i++ {
		d.PartitionOver(prefix, nil, nil).Mark(txn, &m, int64(i), dedup.MakeID("", fmt.Sprint("e", i)), [32]byte{byte(i), byte(i >> 8)}, at)
	}
	d.PartitionOver(prefix, nil, nil).Stage(txn, &m)
	recs := changelog(txn)
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	return recs
}

// restore applies changelog records to st through Store.Restore, as the
// processor's restore does.
func restore(t *testing.T, st *state.Store, d *dedup.Store, recs []record, now time.Time) int {
	t.Helper()
	var out []state.Record
	for _, r := range recs {
		if err := d.Restore(r.key, r.val, now, func(k, v []byte) { out = append(out, state.Record{Key: k, Value: v}) }); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Restore(state.Task{Topic: "in", Partition: 3}, out, 1); err != nil {
		t.Fatal(err)
	}
	return len(out)
}

// TestSegments: a transaction's marks reach the changelog as segment
// records only (one per segmentMax ids), and a restore from them alone
// knows every id again, with its fingerprint.
func TestSegments(t *testing.T) {
	d := dedup.NewStore(time.Hour)
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	const n = 2048 + 5 // two segments
	recs := markAll(t, store(t), d, 0, n, now)
	if len(recs) != 2 {
		t.Fatalf("%d changelog records for %d marks, want 2 segments", len(recs), n)
	}
	for _, r := range recs {
		if r.key[0] != dedup.SegmentKind || len(r.val) > 100<<10 {
			t.Fatalf("changelog record %x (%d bytes) is not a segment under 100 KiB", r.key, len(r.val))
		}
	}
	fresh := store(t)
	if got := restore(t, fresh, d, recs, now.Add(time.Minute)); got != n+2 {
		t.Fatalf("restore wrote %d keys, want %d (%d entries and 2 markers)", got, n+2, n)
	}
	p, err := d.PartitionRead(fresh.Scan, prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1, 2047, 2048, n - 1} {
		id, fp := dedup.MakeID("", fmt.Sprint("e", i)), [32]byte{byte(i), byte(i >> 8)}
		for fp2, want := range map[[32]byte]dedup.Verdict{fp: dedup.Duplicate, {0xff}: dedup.Conflict} {
			if v, err := p.Check(fresh.NewTxn(), id, fp2, now.Add(time.Minute)); err != nil || v != want {
				t.Fatalf("e%d after restore: %s (%v), want %s", i, v, err, want)
			}
		}
	}
	f, err := dedup.BuildFilter(fresh.Scan, prefix)
	if err != nil || !f.MayContain(dedup.MakeID("", "e2049")) {
		t.Fatalf("filter built after restore misses a restored id (%v)", err)
	}
}

// TestRestoreDropsExpired: an expired segment restores to its marker only
// (for the sweep to tombstone), an expired entry of the pre-segment layout
// to nothing; live ones and other keys pass; a corrupt segment is an error.
func TestRestoreDropsExpired(t *testing.T) {
	d := dedup.NewStore(time.Hour)
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	seg := markAll(t, store(t), d, 0, 3, now)[0]
	legacy := record{append([]byte{dedup.Kind}, make([]byte, 16)...), binary.BigEndian.AppendUint64(make([]byte, 32), uint64(now.UnixMilli()))}
	count := func(r record, at time.Time) int {
		n := 0
		if err := d.Restore(r.key, r.val, at, func(_, _ []byte) { n++ }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, c := range []struct {
		name string
		r    record
		at   time.Time
		want int
	}{
		{"live segment", seg, now.Add(30 * time.Minute), 4},
		{"expired segment", seg, now.Add(time.Hour + time.Millisecond), 1},
		{"live legacy entry", legacy, now.Add(30 * time.Minute), 1},
		{"expired legacy entry", legacy, now.Add(2 * time.Hour), 0},
		{"segment tombstone", record{seg.key, nil}, now.Add(100 * time.Hour), 1},
		{"other kind", record{[]byte("a-not-dedup"), legacy.val}, now.Add(100 * time.Hour), 1},
	} {
		if got := count(c.r, c.at); got != c.want {
			t.Errorf("%s: %d writes, want %d", c.name, got, c.want)
		}
	}
	err := d.Restore(seg.key, seg.val[:len(seg.val)-1], now, func(_, _ []byte) {})
	if !errors.Is(err, dedup.ErrCorrupt) {
		t.Fatalf("truncated segment: %v, want ErrCorrupt", err)
	}
	// An entry under its epoch is a local write: no changelog carries one.
	err = d.Restore(append([]byte{dedup.EpochKind}, make([]byte, 24)...), legacy.val, now, func(_, _ []byte) {})
	if !errors.Is(err, dedup.ErrCorrupt) {
		t.Fatalf("epoch entry in a changelog: %v, want ErrCorrupt", err)
	}
}

// TestSweepDeletesExpiredInChunks: a sweep pass tombstones exactly the
// expired segments (changelog tombstones), deletes each epoch whose entries
// have all expired with one local range deletion (their segments'
// tombstones cover them), and deletes the expired entries of the earlier
// layout one by one – with a changelog tombstone for one of the
// pre-segment layout –, a bounded chunk at a time, and waits retention/8
// before the next pass. An epoch still holding a live entry stays whole:
// Check ignores its expired ones.
func TestSweepDeletesExpiredInChunks(t *testing.T) {
	d := dedup.NewStore(time.Hour) // epochs of 7.5 minutes, from the hour
	now := time.Date(2026, 6, 28, 10, 1, 0, 0, time.UTC)
	st := store(t)
	at := func(h, m, s int) time.Time { return time.Date(2026, 6, 28, h, m, s, 0, time.UTC) }
	for s, mark := range []time.Time{
		at(8, 0, 0), at(8, 4, 0), // expired, epoch [8:00, 8:07:30)
		at(8, 8, 0),  // expired, epoch [8:07:30, 8:15)
		at(9, 0, 30), // expired, in epoch [9:00, 9:07:30) with a live segment
	} {
		markAll(t, st, d, 5*s, 5, mark)
	}
	markAll(t, st, d, 20, 5, at(9, 5, 0)) // live
	markAll(t, st, d, 25, 5, now)         // live
	// Entries of the earlier layouts, keyed by id alone: of the pre-segment
	// layout (a changelog record of their own) and restored from a segment
	// (one byte longer, local).
	txn := st.NewTxn()
	for name, at := range map[string]time.Time{"old": now.Add(-2 * time.Hour), "new": now} {
		id := dedup.MakeID("", name)
		key := append(dedup.Prefix(prefix), id[:]...)
		txn.Set(key, binary.BigEndian.AppendUint64(make([]byte, 32), uint64(at.UnixMilli())))
		id = dedup.MakeID("", "seg-"+name)
		key = append(dedup.Prefix(prefix), id[:]...)
		txn.SetLocal(key, append(binary.BigEndian.AppendUint64(make([]byte, 32), uint64(at.UnixMilli())), 1))
	}
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	sw := d.PartitionOver(prefix, nil, nil)
	total, tombstones, chunks := 0, 0, 0
	for {
		txn := st.NewTxn()
		n, err := sw.Sweep(txn, now, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range changelog(txn) {
			if r.val != nil {
				t.Fatalf("sweep staged a write of %x", r.key)
			}
			tombstones++
		}
		if err := txn.Commit(); err != nil {
			t.Fatal(err)
		}
		total += n
		chunks++
		if n == 0 && chunks > 1 {
			break
		}
		if chunks > 30 {
			t.Fatal("sweep does not finish")
		}
	}
	if total != 4+2+2 || tombstones != 4+1 {
		t.Fatalf("made %d deletions with %d changelog tombstones, want 8 with 5 (4 segments, 2 epochs, 2 old-layout entries of which 1 with its tombstone)", total, tombstones)
	}
	if n, _ := sw.Sweep(st.NewTxn(), now.Add(time.Minute), 3); n != 0 {
		t.Fatal("a new pass started before retention/8")
	}
	keys := map[byte]int{}
	if err := st.Scan(prefix, func(k, _ []byte) error { keys[k[len(prefix)]]++; return nil }); err != nil {
		t.Fatal(err)
	}
	if keys[dedup.EpochKind] != 15 || keys[dedup.Kind] != 2 || keys[dedup.SegmentKind] != 2 {
		t.Fatalf("left %d entries, %d of the earlier layouts and %d segments, want 15, 2 and 2",
			keys[dedup.EpochKind], keys[dedup.Kind], keys[dedup.SegmentKind])
	}
	p, err := d.PartitionRead(st.Scan, prefix)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]dedup.Verdict{"e15": dedup.New, "e20": dedup.Duplicate, "e29": dedup.Duplicate,
		"new": dedup.Duplicate, "seg-new": dedup.Duplicate} {
		i := 0
		fmt.Sscanf(name, "e%d", &i)
		fp := [32]byte{byte(i), byte(i >> 8)}
		if name[0] != 'e' {
			fp = [32]byte{}
		}
		if v, _ := p.Check(st.NewTxn(), dedup.MakeID("", name), fp, now); v != want {
			t.Fatalf("%s after the sweep: %s, want %s", name, v, want)
		}
	}
}

// TestFilter: every added id is found, and absent ids are rejected but for
// under 1% even when the filter is at the size it was built for (Full).
func TestFilter(t *testing.T) {
	f := dedup.NewFilter(1 << 18)
	n := 0
	for ; !f.Full(); n++ {
		f.Add(dedup.MakeID("", "in-"+strconv.Itoa(n)))
	}
	for i := range n {
		if !f.MayContain(dedup.MakeID("", "in-"+strconv.Itoa(i))) {
			t.Fatalf("in-%d was added but is rejected", i)
		}
	}
	fp := 0
	const absent = 200000
	for i := range absent {
		if f.MayContain(dedup.MakeID("", "out-"+strconv.Itoa(i))) {
			fp++
		}
	}
	if fp > absent/100 {
		t.Fatalf("%d false positives in %d absent ids with %d added", fp, absent, n)
	}
	t.Logf("%d ids added (full); %d false positives in %d absent ids", n, fp, absent)
}

// TestSweepTombstonesRestoredExpiredSegment: a segment that had expired when
// another instance restored it still gets its tombstone, from that
// instance's sweep (the writer may never sweep again).
func TestSweepTombstonesRestoredExpiredSegment(t *testing.T) {
	d := dedup.NewStore(time.Hour)
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	recs := markAll(t, store(t), d, 0, 3, now.Add(-2*time.Hour))
	fresh := store(t)
	if n := restore(t, fresh, d, recs, now); n != 1 {
		t.Fatalf("restore of an expired segment wrote %d keys, want its marker only", n)
	}
	txn := fresh.NewTxn()
	if _, err := d.PartitionOver(prefix, nil, nil).Sweep(txn, now, 100); err != nil {
		t.Fatal(err)
	}
	got := changelog(txn)
	if len(got) != 1 || got[0].val != nil || string(got[0].key) != string(recs[0].key) {
		t.Fatalf("sweep staged %d changelog records, want the segment's tombstone", len(got))
	}
}

// TestCheckFindsEveryEpoch: a mark is found in whichever epoch it fell –
// by the partition that marked it and by one that only read the store –
// including one a clock that stepped back put before the newest, and an
// expired one a clock that stepped back makes live again; an epoch leaves
// the list once a sweep pass finds it deleted; an entry of the earlier
// layout, keyed by id alone, is found once a scan has seen one.
func TestCheckFindsEveryEpoch(t *testing.T) {
	st := store(t)
	d := dedup.NewStore(time.Hour) // epochs of 7.5 minutes, from the hour
	at := func(m int) time.Time { return time.Date(2026, 6, 28, 10, m, 0, 0, time.UTC) }
	p := d.PartitionOver(prefix, nil, nil)
	mark := func(name string, now time.Time) {
		t.Helper()
		txn := st.NewTxn()
		var m dedup.Marks
		p.Mark(txn, &m, 0, dedup.MakeID("", name), [32]byte{1}, now)
		p.Stage(txn, &m)
		if err := txn.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(p *dedup.Partition, name string, now time.Time, want dedup.Verdict) {
		t.Helper()
		if v, err := p.Check(st.NewTxn(), dedup.MakeID("", name), [32]byte{1}, now); err != nil || v != want {
			t.Fatalf("%s at %s: %s (%v), want %s", name, now.Format("15:04"), v, err, want)
		}
	}
	mark("a", at(0))
	mark("b", at(20))
	mark("c", at(40))
	mark("d", at(10)) // the clock stepped back
	ms := func(m, s int) int64 { return time.Date(2026, 6, 28, 10, m, s, 0, time.UTC).UnixMilli() }
	if got, want := fmt.Sprint(p.Epochs()), fmt.Sprint([]int64{ms(7, 30), ms(15, 0), ms(22, 30), ms(45, 0)}); got != want {
		t.Fatalf("epochs %s, want %s", got, want)
	}
	read, err := d.PartitionRead(st.Scan, prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []*dedup.Partition{p, read} {
		for _, name := range []string{"a", "b", "c", "d"} {
			check(q, name, at(45), dedup.Duplicate)
		}
		check(q, "e", at(45), dedup.New)
	}
	// At 11:10, a's epoch (10:00–10:07:30) has expired, d's (to 10:15) not.
	check(p, "a", at(70), dedup.New)
	check(p, "d", at(70), dedup.Duplicate)
	mark("f", at(70))
	// A clock that steps back finds a again: nothing has deleted it.
	check(p, "a", at(45), dedup.Duplicate)
	// A sweep pass deletes a's epoch; the list keeps it until the next pass
	// no longer finds it in the store (the deletion might have aborted).
	sweepChunk(t, st, p, at(70), 100)
	if got := p.Epochs(); len(got) != 5 || got[0] != ms(7, 30) {
		t.Fatalf("epochs after the pass that deleted a's: %v, want all five still", got)
	}
	sweepChunk(t, st, p, at(78), 100) // the next pass, retention/8 later: d's epoch has expired too
	if got, want := fmt.Sprint(p.Epochs()), fmt.Sprint([]int64{ms(15, 0), ms(22, 30), ms(45, 0), ms(75, 0)}); got != want {
		t.Fatalf("epochs after the next pass: %s, want %s (a's gone, d's being deleted)", got, want)
	}
	check(p, "a", at(45), dedup.New) // deleted: gone even for a clock stepped back
	// An entry of the earlier layout.
	txn := st.NewTxn()
	id := dedup.MakeID("", "old")
	txn.SetLocal(append(dedup.Prefix(prefix), id[:]...), append(binary.BigEndian.AppendUint64(append(make([]byte, 0, 41), make([]byte, 32)...), uint64(at(30).UnixMilli())), 1))
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	read, err = d.PartitionRead(st.Scan, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := read.Check(st.NewTxn(), id, [32]byte{}, at(45)); err != nil || v != dedup.Duplicate {
		t.Fatalf("an entry of the earlier layout: %s (%v), want duplicate", v, err)
	}
}

// TestSweepForgetsTheEarlierLayout: once a sweep pass has left no live entry
// of the earlier layout, Check stops asking for one; while one is live,
// wherever the pass's chunks meet it, it goes on.
func TestSweepForgetsTheEarlierLayout(t *testing.T) {
	d := dedup.NewStore(time.Hour)
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	for _, live := range []int{-1, 0, 1} { // which entry is live (-1: none)
		st := store(t)
		txn := st.NewTxn()
		for i := range 2 {
			at := now.Add(-2 * time.Hour)
			if i == live {
				at = now
			}
			id := dedup.MakeID("", fmt.Sprint("old-", i))
			txn.SetLocal(append(dedup.Prefix(prefix), id[:]...), append(binary.BigEndian.AppendUint64(make([]byte, 32), uint64(at.UnixMilli())), 1))
		}
		if err := txn.Commit(); err != nil {
			t.Fatal(err)
		}
		p, err := d.PartitionRead(st.Scan, prefix)
		if err != nil || !p.Legacy() {
			t.Fatalf("a scan over entries of the earlier layout: legacy %v (%v), want true", p.Legacy(), err)
		}
		for range 3 { // chunks of one: the pass spans transactions
			sweepChunk(t, st, p, now, 1)
		}
		if p.Legacy() != (live >= 0) {
			t.Fatalf("entry %d live: legacy %v after the pass, want %v", live, p.Legacy(), live >= 0)
		}
	}
}

// TestSweepKeepsTheEarlierLayoutARestoreBrought: a restore that brings in
// an entry of the earlier layout while a pass is under way, behind its
// cursor, keeps Check asking for such entries after the pass.
func TestSweepKeepsTheEarlierLayoutARestoreBrought(t *testing.T) {
	d := dedup.NewStore(time.Hour)
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	st := store(t)
	put := func(id dedup.ID, at time.Time) {
		t.Helper()
		txn := st.NewTxn()
		txn.SetLocal(append(dedup.Prefix(prefix), id[:]...), append(binary.BigEndian.AppendUint64(make([]byte, 32), uint64(at.UnixMilli())), 1))
		if err := txn.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	old := []dedup.ID{dedup.MakeID("", "old-0"), dedup.MakeID("", "old-1")}
	for _, id := range old {
		put(id, now.Add(-2*time.Hour))
	}
	p, err := d.PartitionRead(st.Scan, prefix)
	if err != nil {
		t.Fatal(err)
	}
	sweepChunk(t, st, p, now, 1) // the first chunk: one entry examined, the pass goes on
	// A live entry sorting before both, as a restore would bring it in.
	var early dedup.ID
	for i := 0; ; i++ {
		early = dedup.MakeID("", fmt.Sprint("restored-", i))
		if bytes.Compare(early[:], old[0][:]) < 0 && bytes.Compare(early[:], old[1][:]) < 0 {
			break
		}
	}
	put(early, now)
	if err := p.RebuildFilter(st.Scan); err != nil {
		t.Fatal(err)
	}
	sweepChunk(t, st, p, now, 1)
	sweepChunk(t, st, p, now, 1)
	if !p.Legacy() {
		t.Fatal("the pass concluded there are no live entries of the earlier layout, but a restore brought one behind its cursor")
	}
	if v, err := p.Check(st.NewTxn(), early, [32]byte{}, now); err != nil || v != dedup.Duplicate {
		t.Fatalf("the restored entry: %s (%v), want duplicate", v, err)
	}
}

// sweepChunk runs one chunk of p's sweep at now, examining at most examine
// keys, in a transaction of its own, and commits it.
func sweepChunk(t *testing.T, st *state.Store, p *dedup.Partition, now time.Time, examine int) {
	t.Helper()
	txn := st.NewTxn()
	if _, err := p.Sweep(txn, now, examine); err != nil {
		t.Fatal(err)
	}
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
}
