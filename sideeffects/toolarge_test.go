package sideeffects_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/sideeffects"
)

// TestExecutorHugeNonJSONCommandDeadLettered: a projector-command header on a
// 600 KB non-JSON value on the effects topic is dead-lettered with bounded
// headers, and the executor keeps running; so is a JSON command whose
// status is 600 KB.
func TestExecutorHugeNonJSONCommandDeadLettered(t *testing.T) {
	brokers, _, _ := setup(t, 100)
	rc := newReceiver(t)
	l := startLive(t, brokers, t.TempDir(), rc.srv.URL, "retry")
	defer l.stop(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchMaxBytes(4<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cmd := &kgo.Record{Topic: "fx.effects", Key: []byte("k"), Value: []byte(strings.Repeat("\x01not json ", 60<<10)),
		Headers: []kgo.RecordHeader{{Key: sideeffects.HeaderCommand, Value: []byte("1")}}}
	// A JSON command whose status is 600 KB: its error quoted the status
	// into projector-error, unbounded.
	cmd2 := &kgo.Record{Topic: "fx.effects", Key: []byte("k"), Value: []byte(`{"op":"resolve","as":"` + strings.Repeat("s", 600<<10) + `"}`),
		Headers: []kgo.RecordHeader{{Key: sideeffects.HeaderCommand, Value: []byte("1")}}}
	// One at a time: together they make a batch over the topic's limit
	// (kafka.maxRecordBytes), which the broker refuses whole.
	for _, r := range []*kgo.Record{cmd, cmd2} {
		waitFor(t, 30*time.Second, "the effects topic to take a command", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			return cl.ProduceSync(ctx, r).FirstErr() == nil
		})
	}
	var dl []*kgo.Record
	waitFor(t, 30*time.Second, "the dead letter", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		dl, _ = testkit.ReadAll(ctx, brokers, "fx.dlq")
		return len(dl) >= 2
	})
	for _, r := range dl {
		for _, h := range r.Headers {
			if len(h.Value) > 1<<10+64 {
				t.Errorf("header %s is %d bytes, want ≤ 1 KiB", h.Key, len(h.Value))
			}
		}
	}
	select {
	case err := <-l.done:
		t.Fatalf("the worker exited: %v", err)
	default:
	}
}
