package processor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/projection"
)

// A projection written in Go: a running total per customer, kept by a
// projection.HandlerFunc on a processor. Everything here is public API (and
// franz-go's kfake as the broker), so another module can do the same.
func Example_goProjection() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A single-node Kafka-compatible broker in memory.
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()

	dir, err := os.MkdirTemp("", "projector-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// The handler: state is the aggregate's current JSON object.
	totals := projection.HandlerFunc(func(state []byte, ev *projection.Event) (projection.Result, error) {
		var cur struct {
			Orders int `json:"orders"`
			Total  int `json:"total"`
		}
		var order struct {
			Amount int `json:"amount"`
		}
		if err := json.Unmarshal(state, &cur); err != nil {
			return projection.Result{}, err
		}
		if err := json.Unmarshal(ev.Payload, &order); err != nil {
			return projection.Result{}, err
		}
		cur.Orders++
		cur.Total += order.Amount
		next, err := json.Marshal(cur)
		return projection.Result{State: next}, err
	})

	p, err := processor.New(processor.Config{
		// Dead letters go to example.dlq, intents to example.effects.
		Session:     processor.Session{Name: "example", InstanceID: "i1", Brokers: brokers},
		StateDir:    dir, // opened by New, closed when Run returns
		Inputs:      []string{"orders"},
		Projections: []*projection.Projection{{Name: "customer-totals", Topic: "customer-totals.v1", Handler: totals, Versioned: true}},
	})
	if err != nil {
		log.Fatal(err)
	}

	// Three events of two customers.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	for i, e := range []struct {
		customer string
		version  int
		amount   int
	}{{"c1", 1, 10}, {"c2", 1, 7}, {"c1", 2, 5}} {
		ev := fmt.Sprintf(`{"eventId":"e%d","eventType":"OrderPlaced","aggregateId":%q,"aggregateVersion":%d,"payload":{"amount":%d}}`,
			i, e.customer, e.version, e.amount)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Key: []byte(e.customer), Value: []byte(ev)}).FirstErr(); err != nil {
			log.Fatal(err)
		}
	}

	// Run the processor until the three events are applied and committed:
	// the counts are checked after every transaction.
	committed := make(chan struct{}, 1)
	p.Stats().Observe(func(processor.TxnObservation) {
		select {
		case committed <- struct{}{}:
		default:
		}
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(runCtx) }()
	for p.Stats().Events("customer-totals", processor.OutcomeApplied) < 3 && ctx.Err() == nil {
		select {
		case <-committed:
		case <-ctx.Done():
		}
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}

	// Read the projection topic: one record per applied event (sorted, as
	// the topic's partitions are fetched in no fixed order).
	rd, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("customer-totals.v1"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		log.Fatal(err)
	}
	defer rd.Close()
	var records []string
	for len(records) < 3 && ctx.Err() == nil {
		rd.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			records = append(records, fmt.Sprintf("%s %s", r.Key, r.Value))
		})
	}
	slices.Sort(records)
	for _, r := range records {
		fmt.Println(r)
	}
	// Output:
	// c1 {"projection":"customer-totals","aggregateId":"c1","version":1,"state":{"orders":1,"total":10},"lastEventId":"e0","lastEventType":"OrderPlaced"}
	// c1 {"projection":"customer-totals","aggregateId":"c1","version":2,"state":{"orders":2,"total":15},"lastEventId":"e2","lastEventType":"OrderPlaced"}
	// c2 {"projection":"customer-totals","aggregateId":"c2","version":1,"state":{"orders":1,"total":7},"lastEventId":"e1","lastEventType":"OrderPlaced"}
}
