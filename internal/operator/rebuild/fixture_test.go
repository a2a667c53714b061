package rebuild

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/testsize"
	"github.com/projector-dev/projector/internal/harness/workload"
)

const (
	liveName   = "rb"
	input      = "events"
	liveTopic  = "overview.v1"
	effectName = "sla-breach-email"
)

// fixture is an embedded broker, a webhook receiver and a configuration of
// a live worker with one projection and one side effect.
type fixture struct {
	brokers []string
	dir     string
	recv    *receiver
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	_, brokers := testkit.Broker(t, 4, input)
	return &fixture{brokers: brokers, dir: t.TempDir(), recv: newReceiver(t)}
}

// startLive runs the live worker of cfg until the test ends (t.Cleanup:
// before the fixture's broker and receiver close).
func startLive(t *testing.T, cfg *config.Config) *wiring.App {
	t.Helper()
	a, err := wiring.New(cfg, wiring.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("live worker: %v", err)
		}
		a.Close()
	})
	return a
}

const configTemplate = `name: %s
kafka:
  brokers: [%s]
  instanceId: t1
  input: [%s]
  maxRecordsPerTransaction: %d
state: {dir: %q}
http: {listen: "off"}
projections:
  - name: overview
    topic: %s
    aggregateTypes: [RegulatoryCase]
    events: {CaseOpened: merge, CaseUpdated: merge, %s CaseClosed: delete}
sideEffects:
  - name: %s
    on: [CaseEscalated]
    when: {field: payload.reasonCode, equals: SLA_BREACH}
    key: "email:case:{aggregateId}:sla-breach:v{aggregateVersion}"
    webhook: {url: %q, timeout: 5s}
`

// config returns the live configuration; escalationMerged false leaves
// CaseEscalated out of the projection's rules (the "changed rule").
func (f *fixture) config(t *testing.T, escalationMerged bool, perTxn int) *config.Config {
	t.Helper()
	return f.configTo(t, escalationMerged, perTxn, f.recv)
}

// configTo is config with the webhook pointing at recv.
func (f *fixture) configTo(t *testing.T, escalationMerged bool, perTxn int, recv *receiver) *config.Config {
	t.Helper()
	esc := "CaseEscalated: merge,"
	if !escalationMerged {
		esc = ""
	}
	body := fmt.Sprintf(configTemplate, liveName, f.brokers[0], input, perTxn, filepath.Join(f.dir, "state"),
		liveTopic, esc, effectName, recv.srv.URL+"/notify")
	cfg, err := config.Parse([]byte(body), os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// receiver is the webhook target: it counts requests and idempotency keys.
type receiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs int
	keys map[string]int
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{keys: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.reqs++
		r.keys[req.Header.Get("Idempotency-Key")]++
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) counts() (reqs, keys int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reqs, len(r.keys)
}

// received returns the idempotency keys seen and how often.
func (r *receiver) received() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.keys)
}

// workloadOptions scales the default mix to events (divided by 10 at the
// tests' small size, the default: testsize).
func workloadOptions(events int, seed uint64) workload.Options {
	if testsize.Small() {
		events /= 10
	}
	o := workload.Defaults()
	o.Events, o.Aggregates, o.Seed = events, max(events/10, 1), seed
	return o
}

func produce(t *testing.T, brokers []string, recs []workload.Record) {
	t.Helper()
	if err := testkit.Produce(context.Background(), brokers, input, recs); err != nil {
		t.Fatal(err)
	}
}

func waitCaughtUp(t *testing.T, brokers []string, group string) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := testkit.WaitCaughtUp(ctx, brokers, group, input); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// rebuildNow runs a rebuild to completion and fails the test otherwise.
func rebuildNow(t *testing.T, o Options) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Completed {
		t.Fatalf("rebuild into %s did not complete: %+v", o.Topic, res)
	}
	return res
}

func diff(t *testing.T, brokers []string, a, b string, max int) *DiffReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Diff(ctx, DiffOptions{Brokers: brokers, A: a, B: b, Max: max})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func readAll(t *testing.T, brokers []string, topic string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	recs, err := testkit.ReadAll(ctx, brokers, topic)
	if err != nil {
		t.Fatal(err)
	}
	return len(recs)
}

func testkitGenerate(o workload.Options) ([]workload.Record, workload.Expect) {
	return workload.Generate(o)
}
