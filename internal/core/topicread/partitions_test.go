package topicread_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/topicread"
	"github.com/projector-dev/projector/internal/harness/testkit"
)

// TestPartitionsEndPastAnAbortedRecord: the record just below a listed end is
// a zombie's write whose transaction aborted, and the successor's transaction
// that follows it was still open when the ends were listed (what the
// executor's zombie tests read while the successor works). read_committed
// never returns the aborted record, so a read waiting for the offset just
// below the end would wait as long as its context allows; the successor's
// record past it must end the partition.
func TestPartitionsEndPastAnAbortedRecord(t *testing.T) {
	t.Parallel()
	const topic = "end-past-aborted"
	_, brokers := testkit.Broker(t, 1, topic)
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	txnClient := func(id string) *kgo.Client {
		cl, err := kgo.NewClient(append(opts, kgo.TransactionalID(id), kgo.DefaultProduceTopic(topic))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		return cl
	}
	zombie, successor := txnClient("zombie"), txnClient("successor")
	if err := zombie.ProduceSync(ctx, &kgo.Record{Value: []byte("aborted")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := successor.ProduceSync(ctx, &kgo.Record{Value: []byte("committed")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := zombie.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	ends, _, err := topicread.StableEnds(ctx, opts, topic)
	if err != nil {
		t.Fatal(err)
	}
	if r := ends[topic][0]; r.End != 1 {
		t.Fatalf("listed %v, want partition 0 to end at 1 (the successor's open transaction starts there)", ends)
	}
	if err := successor.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	readCtx, readCancel := context.WithTimeout(ctx, 10*time.Second)
	defer readCancel()
	var got []int64
	err = topicread.Partitions(readCtx, opts, ends, topicread.Options{Control: true}, func(r *kgo.Record) error {
		got = append(got, r.Offset)
		return nil
	})
	if err != nil {
		t.Fatalf("read to %v: %v", ends, err)
	}
	if len(got) != 0 {
		t.Fatalf("passed on offsets %v below the end 1, want none (offset 0 aborted)", got)
	}
}
