package eos

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/state"
)

// BenchmarkChangelogEncode is the changelog step alone: a 10000-key task
// batch (5000 events' dedup marks and aggregates) turned into changelog
// records and handed to the producer, as the loop does after processing.
func BenchmarkChangelogEncode(b *testing.B) {
	st, err := state.Open(b.TempDir(), state.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	id := state.Task{Topic: "case-events", Partition: 0}
	task := &Task{ID: id, Prefix: id.Prefix()}
	const topic = "g.case-events.changelog"
	produced := 0
	bt := NewTaskBatch(st, task, time.Now(), func(*kgo.Record) { produced++ })
	val := make([]byte, 300)
	for n := range 5000 {
		bt.Txn.Set(fmt.Appendf(append([]byte(nil), task.Prefix...), "d%016x", n*7919), val[:40])
		bt.Txn.Set(fmt.Appendf(append([]byte(nil), task.Prefix...), "acase-overview\x00CASE-%06d", n), val)
	}
	keys := bt.Txn.Len()
	b.ReportAllocs()
	for b.Loop() {
		if err := stageChangelog(nil, topic, bt); err != nil {
			b.Fatal(err)
		}
	}
	if produced != keys*b.N {
		b.Fatalf("produced %d records, want %d", produced, keys*b.N)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(keys), "ns/key")
}
