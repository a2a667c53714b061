// Command library runs projector as a library, from a module of its own,
// through public names only: a processor with a projection written in Go
// whose handler asks for a side effect, and the side-effect executor that
// calls it as a webhook, against an in-process Kafka-compatible broker
// (franz-go's kfake) and a local HTTP receiver. It produces a few events (one
// of them twice), waits until they are applied and the webhook called,
// prints the projection and the calls, and exits 0.
//
// .ci/run runs it: `cd examples/library && go run .`.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/projection"
	"github.com/projector-dev/projector/sideeffects"
	"github.com/projector-dev/projector/sideeffects/effect"
	"github.com/projector-dev/projector/sideeffects/webhook"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

// The events: two customers' orders, the second one delivered twice (a
// client retry), the last large enough to notify someone.
var events = []string{
	`{"eventId":"e1","eventType":"OrderPlaced","aggregateId":"c1","aggregateVersion":1,"payload":{"amount":10}}`,
	`{"eventId":"e2","eventType":"OrderPlaced","aggregateId":"c2","aggregateVersion":1,"payload":{"amount":7}}`,
	`{"eventId":"e2","eventType":"OrderPlaced","aggregateId":"c2","aggregateVersion":1,"payload":{"amount":7}}`,
	`{"eventId":"e3","eventType":"OrderPlaced","aggregateId":"c1","aggregateVersion":2,"payload":{"amount":150}}`,
}

// totals is the projection's handler: a running total per customer, and a
// "big-order" side effect, keyed by the event id, for an order of 100 or
// more.
func totals(state []byte, ev *projection.Event) (projection.Result, error) {
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
	res := projection.Result{State: next}
	if order.Amount >= 100 {
		res.Effects = []projection.Intent{{Effect: "big-order", Key: "big-order-" + ev.EventID}}
	}
	return res, err
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		return err
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()

	// The webhook receiver: it records each call's idempotency key.
	var mu sync.Mutex
	var calls []string
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer sink.Close()

	dir, err := os.MkdirTemp("", "projector-library")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// The processor and the executor: the same session; dead letters go to
	// shop.dlq and intents to shop.effects (the defaults from Name); each
	// opens its state in its directory and closes it when Run returns.
	ses := processor.Session{Name: "shop", InstanceID: "i1", Brokers: brokers}
	p, err := processor.New(processor.Config{
		Session:  ses,
		StateDir: filepath.Join(dir, "processor"),
		Inputs:   []string{"orders"},
		Projections: []*projection.Projection{{
			Name: "customer-totals", Topic: "customer-totals.v1", Handler: projection.HandlerFunc(totals), Versioned: true,
		}},
	})
	if err != nil {
		return err
	}
	called := make(chan effect.Entry, 16)
	w, err := sideeffects.NewWorker(sideeffects.WorkerConfig{
		Session:  sideeffects.Session(ses),
		StateDir: filepath.Join(dir, "executor"),
		Effects:  map[string]sideeffects.Effect{"big-order": {Caller: &webhook.Client{URL: sink.URL}}},
		OnChange: func(e effect.Entry) { called <- e },
	})
	if err != nil {
		return err
	}

	// A signal after every processor transaction.
	txns := make(chan struct{}, 1)
	p.Stats().Observe(func(processor.TxnObservation) {
		select {
		case txns <- struct{}{}:
		default:
		}
	})

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, run := range []func(context.Context) error{p.Run, w.Run} {
		wg.Go(func() {
			if err := run(runCtx); err != nil {
				errs <- err
			}
		})
	}
	for name, ready := range map[string]func(context.Context) error{"processor": p.WaitReady, "executor": w.WaitReady} {
		if err := waitReady(ctx, ready, errs); err != nil {
			return fmt.Errorf("%s not ready: %w", name, err)
		}
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	for _, ev := range events {
		var e struct {
			AggregateID string `json:"aggregateId"`
		}
		_ = json.Unmarshal([]byte(ev), &e)
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "orders", Key: []byte(e.AggregateID), Value: []byte(ev)}).FirstErr(); err != nil {
			return err
		}
	}

	// Wait until the three events are applied, the copy counted a
	// duplicate, and the side effect succeeded.
	st := p.Stats()
	for st.Events("customer-totals", processor.OutcomeApplied) < 3 || st.Outcome(processor.OutcomeDuplicate) < 1 {
		select {
		case <-txns:
		case err := <-errs:
			return err
		case <-ctx.Done():
			return fmt.Errorf("waiting for the events: %w", ctx.Err())
		}
	}
	for done := false; !done; {
		select {
		case e := <-called:
			done = e.Status == effect.Succeeded
		case err := <-errs:
			return err
		case <-ctx.Done():
			return fmt.Errorf("waiting for the side effect: %w", ctx.Err())
		}
	}
	stop()
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}

	fmt.Printf("outcomes: applied %d, duplicate %d\n", st.Outcome(processor.OutcomeApplied), st.Outcome(processor.OutcomeDuplicate))
	recs, err := readProjection(ctx, brokers, 3)
	if err != nil {
		return err
	}
	for _, r := range recs {
		fmt.Println(r)
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Printf("webhook calls: %v\n", calls)
	return nil
}

// waitReady waits for ready, or for a Run to fail.
func waitReady(ctx context.Context, ready func(context.Context) error, errs <-chan error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ready(ctx) }()
	select {
	case err := <-done:
		return err
	case err := <-errs:
		return err
	}
}

// readProjection reads n committed records of the projection topic, sorted
// (the topic's partitions are fetched in no fixed order).
func readProjection(ctx context.Context, brokers []string, n int) ([]string, error) {
	rd, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("customer-totals.v1"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer rd.Close()
	var out []string
	for len(out) < n {
		fs := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading the projection: %w", err)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, fmt.Sprintf("%s %s", r.Key, r.Value)) })
	}
	slices.Sort(out)
	return out, nil
}
