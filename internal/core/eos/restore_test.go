package eos

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/app/broker"
	"github.com/projector-dev/projector/internal/core/state"
)

// TestRestoreWritesExpansionsInBatches: changelog records that expand into
// many Pebble writes (dedup segments) are written in batches of at most
// restoreBatch writes, each with the offset after the last record it holds,
// so a restore that fails part-way leaves Pebble exactly at a record
// boundary, and restores the rest next time.
func TestRestoreWritesExpansionsInBatches(t *testing.T) {
	c, err := broker.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "in.changelog"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.DefaultProduceTopic("in.changelog"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	const records = 5
	for i := range records {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte{'x', byte(i)}, Value: []byte{1}}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	st, err := state.Open("mem", state.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	// Each record expands into 60% of a batch: every second record fills
	// one. The fourth record (offset 3) fails the first restore.
	per := restoreBatch * 6 / 10
	failAt := 3
	expand := func(key, _ []byte, _ time.Time, emit func(k, v []byte)) error {
		if int(key[1]) == failAt {
			return errors.New("corrupt")
		}
		for j := range per {
			emit(fmt.Appendf(nil, "k%d-%07d", key[1], j), binary.BigEndian.AppendUint32(nil, uint32(j)))
		}
		return nil
	}
	l := New[TaskHandler](Config{Session: Session{Store: st}, Restore: expand}, nil)
	r := l.newRestorer(cl)
	task := state.Task{Topic: "in", Partition: 0}
	has := func(rec int) bool {
		_, ok, err := st.Get(append(task.Prefix(), fmt.Appendf(nil, "k%d-%07d", rec, per-1)...))
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	if _, err := r.restoreTask(ctx, task, "in.changelog", records, records); err == nil {
		t.Fatal("restore of a corrupt record succeeded")
	}
	// Records 0 and 1 filled a batch (written with offset 2); record 2
	// was in the next one, lost with the failure.
	if off, err := st.ChangelogOffset(task); err != nil || off != 2 {
		t.Fatalf("changelog offset after the failed restore: %d (%v), want 2", off, err)
	}
	if !has(0) || !has(1) || has(2) {
		t.Fatalf("records restored: 0:%v 1:%v 2:%v, want records 0 and 1 only", has(0), has(1), has(2))
	}

	failAt = -1
	n, err := r.restoreTask(ctx, task, "in.changelog", records, records)
	if err != nil {
		t.Fatal(err)
	}
	if n != records-2 {
		t.Fatalf("second restore read %d records, want %d", n, records-2)
	}
	if off, _ := st.ChangelogOffset(task); off != records {
		t.Fatalf("changelog offset %d, want %d", off, records)
	}
	for i := range records {
		if !has(i) {
			t.Fatalf("record %d not restored", i)
		}
	}
	if got := l.stats.Restored(); got != int64(records) {
		t.Fatalf("restored-records counter %d, want %d (changelog records, not writes)", got, records)
	}
}
