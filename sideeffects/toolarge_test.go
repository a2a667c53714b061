package sideeffects_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/internal/runtime/app"
	"github.com/projector-dev/projector/internal/runtime/config"
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

// htmlConfig is a worker (processor and executor) whose one side effect
// fires on every SLA escalation, with kafka.maxRecordBytes at 1 MiB.
const htmlConfig = `name: fx
kafka:
  brokers: [%s]
  instanceId: w1
  input: [case-events]
  maxRecordBytes: 1MiB
  transactionTimeout: 20s
  sessionTimeout: 6s
state: {dir: %q}
http: {listen: "off"}
projections:
  - name: overview
    topic: overview.v1
    events: {CaseEscalated: merge}
sideEffects:
  - name: sla-email
    on: [CaseEscalated]
    when: {field: payload.reasonCode, equals: SLA_BREACH}
    key: "email:{aggregateId}:v{aggregateVersion}"
    webhook: {url: %q, timeout: 5s}
`

// bodyReceiver is a webhook receiver that keeps every request body per
// Idempotency-Key.
type bodyReceiver struct {
	mu     sync.Mutex
	bodies map[string][][]byte
	srv    *httptest.Server
}

func newBodyReceiver(t *testing.T) *bodyReceiver {
	rc := &bodyReceiver{bodies: map[string][][]byte{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		rc.mu.Lock()
		rc.bodies[key] = append(rc.bodies[key], body)
		rc.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"ref-%s"}`, key)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *bodyReceiver) calls(key string) [][]byte {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([][]byte(nil), rc.bodies[key]...)
}

// startHTMLConfig starts a worker of htmlConfig calling url; stop cancels
// it and returns what Run returned.
func startHTMLConfig(t *testing.T, brokers []string, url string) (a *app.App, exited func() (error, bool), stop func() error) {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(htmlConfig, brokers[0], t.TempDir(), url)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if a, err = app.New(cfg, app.Options{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	exited = func() (error, bool) {
		select {
		case err := <-done:
			done <- err
			return err, true
		default:
			return nil, false
		}
	}
	var once sync.Once
	stop = func() (err error) {
		once.Do(func() {
			cancel()
			err = <-done
			a.Close()
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return a, exited, stop
}

// TestExecutorHTMLPayloadCalledOnce is issue 22's defect 1: an event whose
// payload is 200 KB of '<', well under kafka.maxRecordBytes (1 MiB),
// triggers a side effect. The ledger entry used to be encoded with
// json.Marshal, which escapes '<' as \u003c (six bytes): the executor's
// changelog record became 1.2 MB, the broker refused it
// (MESSAGE_TOO_LARGE), and after five aborts the executor exited, on every
// restart. Now the call is made exactly once, with the intent's bytes as
// its body, and the executor keeps running: a small event's effect after
// it is called too.
func TestExecutorHTMLPayloadCalledOnce(t *testing.T) {
	_, brokers := testkit.Broker(t, 1, "case-events")
	rc := newBodyReceiver(t)
	a, exited, stop := startHTMLConfig(t, brokers, rc.srv.URL)
	ctx := context.Background()
	escalation := func(agg, text string) workload.Record {
		return workload.Record{Key: []byte(agg), Value: []byte(`{"eventId":"` + agg + `-1","eventType":"CaseEscalated","aggregateId":"` + agg +
			`","aggregateVersion":1,"payload":{"reasonCode":"SLA_BREACH","text":"` + text + `"}}`)}
	}
	html := escalation("HTML-1", strings.Repeat("<", 200_000))
	if err := testkit.Produce(ctx, brokers, "case-events", []workload.Record{html}); err != nil {
		t.Fatal(err)
	}
	ws := a.Executor.Stats()
	waitFor(t, time.Minute, "the HTML event's effect to succeed, or the worker to exit", func() bool {
		_, out := exited()
		return out || ws.Effects("sla-email", "succeeded") >= 1
	})
	if err, out := exited(); out {
		t.Fatalf("the worker exited: %v", err)
	}
	// The executor keeps running: a small event's effect after it.
	if err := testkit.Produce(ctx, brokers, "case-events", []workload.Record{escalation("SMALL-1", "x")}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the small event's effect to succeed, or the worker to exit", func() bool {
		_, out := exited()
		return out || ws.Effects("sla-email", "succeeded") >= 2
	})
	if err, out := exited(); out {
		t.Fatalf("the worker exited: %v", err)
	}
	intents, err := testkit.ReadAll(ctx, brokers, "fx.effects")
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"email:HTML-1:v1", "email:SMALL-1:v1"} {
		calls := rc.calls(key)
		if len(calls) != 1 {
			t.Fatalf("%s: %d calls, want exactly 1", key, len(calls))
		}
		var intent []byte
		for _, r := range intents {
			if string(r.Key) == key {
				intent = r.Value
			}
		}
		if !bytes.Equal(calls[0], intent) {
			t.Errorf("%s: the webhook body (%d bytes) is not the intent's value (%d bytes)", key, len(calls[0]), len(intent))
		}
	}
	if body := rc.calls("email:HTML-1:v1")[0]; bytes.Count(body, []byte("<")) != 200_000 {
		t.Errorf("the body has %d literal '<', want 200000", bytes.Count(body, []byte("<")))
	}
	if err := stop(); err != nil {
		t.Errorf("run: %v", err)
	}
}
