package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/app/broker"
)

func newCluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := broker.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "events"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func produce(t *testing.T, cl *kgo.Client, topic string, partition int32, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range n {
		r := &kgo.Record{Topic: topic, Partition: partition, Value: []byte("x")}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestKafkaLag(t *testing.T) {
	c := newCluster(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce(t, cl, "events", 0, 5)
	produce(t, cl, "events", 1, 3)
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The group committed offset 2 on partition 0 and nothing on partition 1.
	commit := make(kadm.Offsets)
	commit.AddOffset("events", 0, 2, -1)
	if _, err := adm.CommitOffsets(ctx, "g", commit); err != nil {
		t.Fatal(err)
	}
	lag, err := NewKafkaLag(adm, "g", "events").Lag(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[TopicPartition]int64{{"events", 0}: 3, {"events", 1}: 3}
	if len(lag) != len(want) {
		t.Fatalf("lag %v, want %v", lag, want)
	}
	for k, v := range want {
		if lag[k] != v {
			t.Errorf("lag %v = %d, want %d", k, lag[k], v)
		}
	}
}

// One hook option on several clients, at once and one after another, must
// not panic and must add up.
func TestKafkaClientHooksSharedByClients(t *testing.T) {
	c := newCluster(t)
	reg := prometheus.NewPedanticRegistry()
	hooks, err := KafkaClientHooks(reg)
	if err != nil {
		t.Fatal(err)
	}
	newClient := func() *kgo.Client {
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()), hooks)
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	a, b := newClient(), newClient()
	produce(t, a, "events", 0, 2)
	produce(t, b, "events", 1, 1)
	a.Close()
	b.Close()
	d := newClient()
	produce(t, d, "events", 0, 1)
	d.Close()

	s := series(t, reg)
	if v := s["projector_kafka_produce_records_total{topic=events}"]; v != 4 {
		t.Errorf("produce_records_total = %v, want 4", v)
	}
	if s["projector_kafka_write_bytes_total{node=seed_0}"]+s["projector_kafka_write_bytes_total{node=0}"] <= 0 {
		t.Errorf("no bytes written recorded: %v", s)
	}
	if s["projector_kafka_request_seconds_count"] <= 0 {
		t.Error("no request latency observed")
	}
	if _, err := KafkaClientHooks(reg); err == nil {
		t.Error("second KafkaClientHooks on the same registry: no error")
	}
}
