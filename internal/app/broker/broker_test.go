package broker

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestNoClientMetricsRequested: the embedded broker requests no KIP-714
// client metrics, as a Kafka broker without client-metrics resources (its
// default), so clients push none; it still gives each client an instance id.
func TestNoClientMetricsRequested(t *testing.T) {
	b, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kmsg.NewPtrGetTelemetrySubscriptionsRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if resp.ErrorCode != 0 || len(resp.RequestedMetrics) != 0 || resp.ClientInstanceID == [16]byte{} || resp.PushIntervalMillis <= 0 {
		t.Fatalf("GetTelemetrySubscriptions: error %d, requested metrics %q, instance id %x, push interval %d ms; want no error, none requested, an id, a positive interval",
			resp.ErrorCode, resp.RequestedMetrics, resp.ClientInstanceID, resp.PushIntervalMillis)
	}
}
