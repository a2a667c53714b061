package state

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestChangelogPosition: every write of a task's changelog offset (a
// commit, a restore batch, MarkMatched) stamps it, in the same batch, with
// the store clock's time as when the state matched the changelog; a reset
// drops both; an offset written before the time was recorded (8 bytes) reads
// as of unknown age.
func TestChangelogPosition(t *testing.T) {
	clock := time.Unix(1_000_000, 0)
	s, err := Open("mem", Options{FS: vfs.NewMem(), Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	task := Task{Topic: "in", Partition: 1}
	check := func(what string, wantNext int64, wantAt time.Time, wantOK bool) {
		t.Helper()
		next, at, ok, err := s.ChangelogPosition(task)
		if err != nil || next != wantNext || !at.Equal(wantAt) || ok != wantOK {
			t.Fatalf("%s: position %d at %v (stored %v, %v), want %d at %v (stored %v)", what, next, at, ok, err, wantNext, wantAt, wantOK)
		}
	}
	check("never seen", 0, time.Time{}, false)
	if err := s.MarkMatched(task); err != nil {
		t.Fatal(err)
	}
	check("mark of a task never seen", 0, time.Time{}, false)

	txn := s.NewTxn()
	txn.Set(append(task.Prefix(), 'k'), []byte("v"))
	txn.SetChangelogOffset(task, 4)
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	check("commit", 4, clock, true)

	clock = clock.Add(time.Hour)
	if err := s.Restore(task, []Record{{Key: []byte("k"), Value: nil}}, 9); err != nil {
		t.Fatal(err)
	}
	check("restore", 9, clock, true)

	clock = clock.Add(time.Hour)
	if err := s.MarkMatched(task); err != nil {
		t.Fatal(err)
	}
	check("mark", 9, clock, true)

	// A store written by an earlier version: the offset alone.
	if err := s.db.Set(offsetKey(task), binary.BigEndian.AppendUint64(nil, 12), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s.cache.clear()
	check("legacy offset", 12, time.Time{}, true)
	if off, err := s.ChangelogOffset(task); err != nil || off != 12 {
		t.Fatalf("legacy ChangelogOffset %d %v, want 12", off, err)
	}

	if err := s.Reset(task); err != nil {
		t.Fatal(err)
	}
	check("reset", 0, time.Time{}, false)
}
