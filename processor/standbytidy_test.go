package processor

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/core/state"
)

// TestStandbyTidyDueTimes: the standby's dedup tidy starts a task's first
// pass at its first call, runs a pass one chunk per call, starts the next
// one no earlier than SweepPeriod after the last ended, and deletes only
// expired entries – an expired epoch's with one range deletion, those of
// the earlier layout one by one – (markers stay), leaving the task's
// changelog offset as it was. A task never restored here is left alone.
// The clock is the now each call passes.
func TestStandbyTidyDueTimes(t *testing.T) {
	st, err := state.Open(t.TempDir(), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	d := dedup.NewStore(8 * time.Hour) // a pass at most every hour; epochs of an hour
	task := state.Task{Topic: "in", Partition: 1}
	t0 := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	// Segment A (3 ids) at t0, segment B (2 ids) at t0+1h, in the next
	// epoch, restored as a standby's read restores them, up to changelog
	// offset 7; and three entries an earlier version restored from a
	// segment of t0 under the id alone (local, one byte longer).
	var recs []state.Record
	for _, seg := range []struct {
		from, n int
		at      time.Time
	}{{0, 3, t0}, {3, 2, t0.Add(time.Hour)}} {
		recs = append(recs, segmentRecords(t, d, task, seg.from, seg.n, seg.at)...)
	}
	for i := range 3 {
		id := dedup.MakeID("", fmt.Sprint("old-", i))
		val := append(binary.BigEndian.AppendUint64(make([]byte, 32), uint64(t0.UnixMilli())), 1)
		recs = append(recs, state.Record{Key: append([]byte{dedup.Kind}, id[:]...), Value: val})
	}
	if err := st.Restore(task, recs, 7); err != nil {
		t.Fatal(err)
	}
	count := func(kind byte) (n int) {
		if err := st.Scan(append(task.Prefix(), kind), func(_, _ []byte) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	tidy := newStandbyTidy(st, d)
	tidy.chunk = 2
	// runPass calls tidy at now until the pass ends; it returns the calls.
	runPass := func(now time.Time) int {
		t.Helper()
		for calls := 1; calls <= 10; calls++ {
			if err := tidy.tidy(task, now); err != nil {
				t.Fatal(err)
			}
			if tidy.passes[task].cursor == nil {
				return calls
			}
		}
		t.Fatal("the pass does not end")
		return 0
	}

	t1 := t0.Add(9*time.Hour + 31*time.Minute) // A's epoch expired, B's live
	if calls := runPass(t1); calls != 2 {
		t.Fatalf("the first pass over 3 entries of the earlier layout in chunks of 2 took %d calls, want 2", calls)
	}
	if e, l, m := count(dedup.EpochKind), count(dedup.Kind), count(dedup.SegmentKind); e != 2 || l != 0 || m != 2 {
		t.Fatalf("after the first pass: %d entries, %d of the earlier layout and %d markers, want B's 2 entries, none and both markers", e, l, m)
	}
	// B's epoch has expired by t1+30m, but the next pass is not due before
	// t1+1h.
	if err := tidy.tidy(task, t1.Add(30*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if e := count(dedup.EpochKind); e != 2 || tidy.passes[task].cursor != nil {
		t.Fatalf("a pass ran 30 minutes after the last one (%d entries left), want none before SweepPeriod (1h)", e)
	}
	if calls := runPass(t1.Add(time.Hour)); calls != 1 {
		t.Fatalf("the second pass took %d calls, want 1", calls)
	}
	if e, m := count(dedup.EpochKind), count(dedup.SegmentKind); e != 0 || m != 2 {
		t.Fatalf("after the second pass: %d entries and %d markers, want none and both markers", e, m)
	}
	if next, err := st.ChangelogOffset(task); err != nil || next != 7 {
		t.Fatalf("changelog offset %d (%v) after the tidy, want 7", next, err)
	}
	// A task without a changelog position here is left alone, expired
	// entries and all: the tidy must not invent a position (the balancer
	// would offer it) by writing one.
	other := state.Task{Topic: "in", Partition: 2}
	txn := st.NewTxn()
	for _, r := range segmentRecords(t, d, other, 0, 2, t0) {
		txn.SetLocal(append(other.Prefix(), r.Key...), r.Value)
	}
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := tidy.tidy(other, t1); err != nil {
		t.Fatal(err)
	}
	if pos, err := st.Positions(); err != nil || len(pos) != 1 {
		t.Fatalf("positions %v (%v) after tidying a task never restored, want only %s", pos, err, task)
	}
}

// segmentRecords marks n ids e<from>… at at in one segment of task and
// returns what a restore of its changelog record writes (restoreRecord).
func segmentRecords(t *testing.T, d *dedup.Store, task state.Task, from, n int, at time.Time) []state.Record {
	t.Helper()
	scratch, err := state.Open(t.TempDir(), state.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer scratch.Close()
	prefix := task.Prefix()
	part, err := d.NewPartition(scratch.Scan, prefix, 16, at)
	if err != nil {
		t.Fatal(err)
	}
	txn := scratch.NewTxn()
	var m dedup.Marks
	for i := from; i < from+n; i++ {
		part.Mark(txn, &m, int64(i), dedup.MakeID("", fmt.Sprint("e", i)), [32]byte{byte(i)}, at)
	}
	part.Stage(txn, &m)
	var out []state.Record
	restore := restoreRecord(d)
	txn.Each(func(k string, v []byte) {
		if err := restore([]byte(k)[len(prefix):], v, at, func(k, v []byte) {
			out = append(out, state.Record{Key: k, Value: v})
		}); err != nil {
			t.Fatal(err)
		}
	})
	return out
}
