package sideeffects_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/core/seam"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/internal/operator/ops"
	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/sideeffects"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// receiver is a webhook endpoint that honours Idempotency-Key: it applies a
// key's effect once and answers later calls with the first result. hang
// makes the first call of chosen keys apply and then stall past the timeout.
type receiver struct {
	mu       sync.Mutex
	requests map[string]int
	applied  map[string]int
	hang     func(key string, call int) bool
	srv      *httptest.Server
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{requests: map[string]int{}, applied: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		key := req.Header.Get("Idempotency-Key")
		io.Copy(io.Discard, req.Body)
		r.mu.Lock()
		r.requests[key]++
		call := r.requests[key]
		first := r.applied[key] == 0
		if first {
			r.applied[key]++
		}
		hang := r.hang != nil && r.hang(key, call)
		r.mu.Unlock()
		if hang {
			select {
			case <-req.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"ref-%s"}`, key)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) counts() (requests, applied map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	q, a := map[string]int{}, map[string]int{}
	for k, v := range r.requests {
		q[k] = v
	}
	for k, v := range r.applied {
		a[k] = v
	}
	return q, a
}

const liveConfig = `name: fx
kafka:
  brokers: [%s]
  instanceId: w1
  input: [case-events]
  transactionTimeout: 20s
  sessionTimeout: 6s
state: {dir: %q}
http: {listen: "off"}
gaps: {holdTimeout: 1h}
projections:
  - name: overview
    topic: overview.v1
    events: {CaseOpened: merge, CaseUpdated: merge, CaseEscalated: merge, CaseClosed: delete}
  - name: audit
    topic: audit.v1
    events: {CaseEscalated: merge}
sideEffects:
  - name: sla-email
    on: [CaseEscalated]
    when: {field: payload.reasonCode, equals: SLA_BREACH}
    key: "email:{aggregateId}:v{aggregateVersion}"
    webhook: {url: %q, timeout: 300ms}
    maxAttempts: 20
    onUnknown: %s
`

// expectedKeys derives the idempotency keys the stream must produce, from
// the records themselves: every distinct applied SLA_BREACH escalation.
func expectedKeys(t *testing.T, recs []workload.Record) map[string]bool {
	evs, err := workload.FirstDeliveries(recs)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, e := range evs {
		if e.Type == "CaseEscalated" && e.Payload["reasonCode"] == "SLA_BREACH" {
			keys[fmt.Sprintf("email:%s:v%d", e.Agg, e.Version)] = true
		}
	}
	return keys
}

type live struct {
	a      *wiring.App
	cancel context.CancelFunc
	done   chan error
}

func startLive(t *testing.T, brokers []string, dir, url, onUnknown string) *live {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(liveConfig, brokers[0], dir, url, onUnknown)), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := wiring.New(cfg, wiring.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &live{a: a, cancel: cancel, done: make(chan error, 1)}
	go func() { l.done <- a.Run(ctx) }()
	return l
}

func (l *live) stop(t *testing.T) {
	t.Helper()
	l.cancel()
	if err := <-l.done; err != nil {
		t.Errorf("run: %v", err)
	}
	l.a.Close()
}

func setup(t *testing.T, events int) ([]string, []workload.Record, map[string]bool) {
	t.Helper()
	_, brokers := testkit.Broker(t, 4, "case-events")
	o := workload.Defaults()
	o.Events, o.Aggregates, o.Seed = events, events/10, 7
	recs, _ := workload.Generate(o)
	keys := expectedKeys(t, recs)
	if len(keys) == 0 {
		t.Fatal("workload has no SLA escalations")
	}
	return brokers, recs, keys
}

// TestLiveEffectsOneExecutionPerKey: duplicated events, the same key emitted
// by two projections, and intents delivered twice all give one execution per
// key; the ledger records every key as succeeded
// (docs/design.md#one-success-per-key).
func TestLiveEffectsOneExecutionPerKey(t *testing.T) {
	brokers, recs, keys := setup(t, 3000)
	rcv := newReceiver(t)
	if err := testkit.Produce(context.Background(), brokers, "case-events", recs); err != nil {
		t.Fatal(err)
	}
	l := startLive(t, brokers, t.TempDir(), rcv.srv.URL, "retry")
	ws := func() *sideeffects.WorkerStats { return l.a.Executor.Stats() }
	testkit.Await(t, 2*time.Minute, "every key to succeed", func() bool {
		return ws().Effects("sla-email", effect.Succeeded) >= int64(len(keys))
	})
	// Deliver every intent again: the ledger must take them as duplicates.
	ledger, err := ops.ReadLedger(context.Background(), []kgo.Opt{kgo.SeedBrokers(brokers...)}, "fx", "fx.effects")
	if err != nil {
		t.Fatal(err)
	}
	var again []workload.Record
	for _, e := range ledger {
		again = append(again, workload.Record{Key: []byte(e.Key), Value: e.Intent})
	}
	before := ws().Duplicates("sla-email")
	if err := testkit.Produce(context.Background(), brokers, "fx.effects", again); err != nil {
		t.Fatal(err)
	}
	testkit.Await(t, time.Minute, "redelivered intents to be seen", func() bool {
		return ws().Duplicates("sla-email") >= before+int64(len(again))
	})
	l.stop(t)

	req, applied := rcv.counts()
	maxReq := 0
	for k := range keys {
		if req[k] != 1 || applied[k] != 1 {
			t.Errorf("key %s: %d requests, applied %d; want 1 and 1", k, req[k], applied[k])
		}
		maxReq = max(maxReq, req[k])
	}
	if len(req) != len(keys) {
		t.Errorf("receiver saw %d keys, want %d", len(req), len(keys))
	}
	enqueued := l.a.Processor.Stats().Effects("sla-email", processor.IntentEnqueued)
	if enqueued != int64(2*len(keys)) { // two projections emit each key
		t.Errorf("intents enqueued %d, want %d (2 projections x %d keys)", enqueued, 2*len(keys), len(keys))
	}
	succeeded := 0
	for _, e := range ledger {
		if e.Status == effect.Succeeded && e.Attempts == 1 && e.Ref == "ref-"+e.Key {
			succeeded++
		}
	}
	if succeeded != len(keys) {
		t.Errorf("ledger: %d of %d keys succeeded with one attempt and the receiver's ref", succeeded, len(keys))
	}
	t.Logf("%d intents (%d per projection), %d executions, %d successes, 0 retries, 0 unknowns; %d intents redelivered -> %d duplicates; max requests per key %d",
		enqueued, len(keys), len(req), succeeded, len(again), ws().Duplicates("sla-email"), maxReq)
}

// TestLiveEffectsUnknownOutcomes: the receiver applies some keys and then
// hangs past the timeout. With onUnknown retry the key is called again with
// the same Idempotency-Key and succeeds (applied once); with park it is
// called once, listed as unknown, and resolvable by hand.
func TestLiveEffectsUnknownOutcomes(t *testing.T) {
	t.Parallel() // mostly waits: webhooks hung past their timeout
	for _, policy := range []string{"retry", "park"} {
		t.Run(policy, func(t *testing.T) {
			brokers, recs, keys := setup(t, 1000)
			rcv := newReceiver(t)
			hung := map[string]bool{}
			n := 0
			for k := range keys {
				if n%3 == 0 {
					hung[k] = true
				}
				n++
			}
			rcv.hang = func(key string, call int) bool { return hung[key] && call == 1 }
			if err := testkit.Produce(context.Background(), brokers, "case-events", recs); err != nil {
				t.Fatal(err)
			}
			l := startLive(t, brokers, t.TempDir(), rcv.srv.URL, policy)
			ws := l.a.Executor.Stats()
			want := int64(len(keys) - len(hung))
			if policy == "retry" {
				want = int64(len(keys))
			}
			testkit.Await(t, 2*time.Minute, "the known outcomes", func() bool { return ws.Effects("sla-email", effect.Succeeded) >= want })
			opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
			if policy == "park" {
				testkit.Await(t, time.Minute, "parked keys", func() bool { return ws.Effects("sla-email", effect.Unknown) >= int64(len(hung)) })
				ledger, err := ops.ReadLedger(context.Background(), opts, "fx", "fx.effects")
				if err != nil {
					t.Fatal(err)
				}
				parked := 0
				var one string
				for _, e := range ledger {
					if e.Status == effect.Unknown {
						parked++
						one = e.Key
						if !hung[e.Key] {
							t.Errorf("key %s is unknown but its call did not hang", e.Key)
						}
					}
				}
				if parked != len(hung) {
					t.Fatalf("%d keys listed unknown, want %d", parked, len(hung))
				}
				if err := ops.SendResolve(context.Background(), opts, "fx.effects", one, effect.Succeeded, "checked by hand"); err != nil {
					t.Fatal(err)
				}
				testkit.Await(t, time.Minute, "the resolve", func() bool { return ws.Resolved("sla-email") >= 1 })
			}
			l.stop(t)
			req, applied := rcv.counts()
			retries := 0
			for k := range keys {
				if applied[k] != 1 {
					t.Errorf("key %s applied %d times", k, applied[k])
				}
				switch {
				case hung[k] && policy == "retry":
					if req[k] < 2 {
						t.Errorf("hung key %s: %d requests, want a retry", k, req[k])
					}
					retries += req[k] - 1
				default:
					if req[k] != 1 {
						t.Errorf("key %s: %d requests, want 1", k, req[k])
					}
				}
			}
			t.Logf("onUnknown %s: %d keys, %d hung (unknown), %d retries with the same key, every key applied once", policy, len(keys), len(hung), retries)
		})
	}
}

// withStore is c running on st, a store the test opened itself
// (internal/core/seam: not public API).
func withStore(st *state.Store, c sideeffects.WorkerConfig) sideeffects.WorkerConfig {
	seam.Executor(&c, seam.Seams{Store: st})
	return c
}
