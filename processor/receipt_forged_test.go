package processor_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/receipt"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/processor"
)

// TestForgedIngressHeaderNeverStopsTheWorker: an input record carries a
// projector-ingress header the ingress never writes – a 600 KB key of '<'
// (its receipt, key and value, would be several MB) – then a record with a
// well-formed header. Found by TestNoRecordStopsAPartition
// (internal/app/wiring). The first event is applied and gets no receipt
// (the header is malformed: the ingress's keys are at most 255 printable
// characters); the second gets its receipt; the worker never exits. Before
// the fix: MESSAGE_TOO_LARGE on the receipts topic, five aborts, Run
// returned.
func TestForgedIngressHeaderNeverStopsTheWorker(t *testing.T) {
	e := newEnv(t, 1)
	const receipts = "case-events.receipts"
	in, err := e.startWith(instOpts{}, state.Options{}, func(c *processor.Config, _ *state.Store) { c.ReceiptsTopic = receipts })
	if err != nil {
		t.Fatal(err)
	}
	defer in.stop(t)
	forged := fmt.Appendf(nil, `{"key":%q,"index":0,"count":1}`, strings.Repeat("<", 600<<10))
	fine := []byte(`{"key":"k-fine","index":0,"count":1}`)
	recs := []*kgo.Record{
		{Topic: inputTopic, Key: []byte("A-1"), Value: bigMerge("A-1", 1, 10).Value, Headers: []kgo.RecordHeader{{Key: receipt.Header, Value: forged}}},
		{Topic: inputTopic, Key: []byte("B-1"), Value: bigMerge("B-1", 1, 10).Value, Headers: []kgo.RecordHeader{{Key: receipt.Header, Value: fine}}},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := testkit.ProduceRecords(ctx, e.brokers, 4<<20, recs...); err != nil {
		t.Fatal(err)
	}
	var got []*kgo.Record
	err = testkit.WaitFor(ctx, 30*time.Second, func() bool {
		select {
		case err := <-in.done:
			in.done <- err
			return true
		default:
		}
		got = e.read(receipts)
		return len(got) > 0
	})
	select {
	case err := <-in.done:
		in.done <- err
		t.Fatalf("the processor exited: %v", err)
	default:
	}
	if err != nil {
		t.Fatalf("no receipt: %v", err)
	}
	if len(got) != 1 || string(got[0].Key) != receipt.Key("", "k-fine", 0) {
		t.Fatalf("receipts %d (first key %.40q), want one, of k-fine", len(got), got[0].Key)
	}
	e.waitCaughtUp(30 * time.Second)
	applied := map[string]bool{}
	for _, r := range e.read(projTopic) {
		applied[string(r.Key)] = true
	}
	if !applied["A-1"] || !applied["B-1"] {
		t.Errorf("applied %v, want A-1 and B-1 (a malformed ingress header changes nothing but the receipt)", applied)
	}
}
