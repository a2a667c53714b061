package rebuild

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRebuildTransactionalInput: an input written in transactions (as the
// ingress's claim stage writes its events, or any exactly-once producer)
// ends with a transaction marker in each partition. A consumer group never
// commits past a marker, so the rebuild group's offsets stop one short of
// the end offsets taken at start; the rebuild still completes, having
// consumed every record.
func TestRebuildTransactionalInput(t *testing.T) {
	f := newFixture(t)
	o := workloadOptions(2_000, 5)
	recs, _ := testkitGenerate(o)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.brokers...), kgo.TransactionalID("txn-input-test"),
		kgo.DefaultProduceTopic(input), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		cl.Produce(ctx, &kgo.Record{Key: r.Key, Value: r.Value}, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer rcancel()
	res, err := Run(rctx, Options{Config: f.config(t, true, 500), Topic: "txn-rebuilt"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Completed || res.Outcomes["applied"] == 0 {
		t.Fatalf("rebuild of a transactionally written input: completed %v, %d records of %d, applied %d",
			res.Completed, res.Records, res.Target, res.Outcomes["applied"])
	}
	t.Logf("%d input records; rebuild consumed %d offsets of %d, applied %d", len(recs), res.Records, res.Target, res.Outcomes["applied"])
}
