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

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/internal/operator/ops"
	"github.com/projector-dev/projector/sideeffects"
	"github.com/projector-dev/projector/sideeffects/effect"
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
		testkit.Await(t, 30*time.Second, "the effects topic to take a command", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			return cl.ProduceSync(ctx, r).FirstErr() == nil
		})
	}
	var dl []*kgo.Record
	testkit.Await(t, 30*time.Second, "the dead letter", func() bool {
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
func startHTMLConfig(t *testing.T, brokers []string, url string) (a *wiring.App, exited func() (error, bool), stop func() error) {
	t.Helper()
	cfg, err := config.Parse([]byte(fmt.Sprintf(htmlConfig, brokers[0], t.TempDir(), url)), nil)
	if err != nil {
		t.Fatal(err)
	}
	if a, err = wiring.New(cfg, wiring.Options{}); err != nil {
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
	testkit.Await(t, time.Minute, "the HTML event's effect to succeed, or the worker to exit", func() bool {
		_, out := exited()
		return out || ws.Effects("sla-email", effect.Succeeded) >= 1
	})
	if err, out := exited(); out {
		t.Fatalf("the worker exited: %v", err)
	}
	// The executor keeps running: a small event's effect after it.
	if err := testkit.Produce(ctx, brokers, "case-events", []workload.Record{escalation("SMALL-1", "x")}); err != nil {
		t.Fatal(err)
	}
	testkit.Await(t, time.Minute, "the small event's effect to succeed, or the worker to exit", func() bool {
		_, out := exited()
		return out || ws.Effects("sla-email", effect.Succeeded) >= 2
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

// TestExecutorLongAnswersBounded: what the receiver says goes into the
// ledger bounded. A 600 KB intent (its entry fits the limit with room for
// any history) meets a receiver that answers 503 twice with a 300 KB
// status line, then 200 with a 300 KB id. Unbounded, the two error texts
// made the entry 1.2 MB: MESSAGE_TOO_LARGE, and the executor stopped at
// every restart. Now each error text and the reference are cut to their
// bounds (effect.MaxErrorBytes, effect.MaxRefBytes), the key succeeds on
// the third call and the executor keeps running.
func TestExecutorLongAnswersBounded(t *testing.T) {
	_, brokers := testkit.Broker(t, 1, "case-events")
	var mu sync.Mutex
	calls := 0
	long := strings.Repeat("<x\x01", 100_000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		if n <= 2 {
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			defer conn.Close()
			fmt.Fprintf(buf, "HTTP/1.1 503 %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", long)
			buf.Flush()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"ref-%s"}`, strings.Repeat("y", 300_000))
	}))
	t.Cleanup(srv.Close)
	a, exited, stop := startHTMLConfig(t, brokers, srv.URL)
	big := workload.Record{Key: []byte("LONG-1"), Value: []byte(`{"eventId":"LONG-1-1","eventType":"CaseEscalated","aggregateId":"LONG-1","aggregateVersion":1,"payload":{"reasonCode":"SLA_BREACH","text":"` +
		strings.Repeat("x", 600_000) + `"}}`)}
	if err := testkit.Produce(context.Background(), brokers, "case-events", []workload.Record{big}); err != nil {
		t.Fatal(err)
	}
	ws := a.Executor.Stats()
	testkit.Await(t, 2*time.Minute, "the effect to succeed, or the worker to exit", func() bool {
		_, out := exited()
		return out || ws.Effects("sla-email", effect.Succeeded) >= 1
	})
	if err, out := exited(); out {
		t.Fatalf("the worker exited: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	ledger, err := ops.ReadLedger(context.Background(), []kgo.Opt{kgo.SeedBrokers(brokers...)}, "fx", "fx.effects")
	if err != nil || len(ledger) != 1 {
		t.Fatalf("ledger: %d entries, %v", len(ledger), err)
	}
	e := ledger[0]
	if e.Status != effect.Succeeded || e.Attempts != 3 || calls != 3 {
		t.Fatalf("entry %s after %d attempts, %d calls; want succeeded after 3", e.Status, e.Attempts, calls)
	}
	for _, at := range e.History[:2] {
		if len(at.Error) > effect.MaxErrorBytes || !strings.Contains(at.Error, effect.TruncatedMark) || !strings.HasPrefix(at.Error, "sideeffects: webhook: 503 <x") {
			t.Errorf("attempt %d: error text of %d bytes, want the status line cut to %d: %.80q", at.N, len(at.Error), effect.MaxErrorBytes, at.Error)
		}
	}
	if len(e.Ref) > effect.MaxRefBytes || !strings.HasPrefix(e.Ref, "ref-yyy") {
		t.Errorf("reference of %d bytes, want the id cut to %d", len(e.Ref), effect.MaxRefBytes)
	}
}

// TestExecutorIntentTooLargeForLedger: an intent that did not come through
// the processor's check – produced to the effects topic by hand, or by a
// version before it – whose ledger entry could outgrow kafka.maxRecordBytes
// is dead-lettered too-large by the executor, never called; the intent
// after it is called, and the executor keeps running.
func TestExecutorIntentTooLargeForLedger(t *testing.T) {
	_, brokers := testkit.Broker(t, 1, "case-events")
	rc := newBodyReceiver(t)
	a, exited, stop := startHTMLConfig(t, brokers, rc.srv.URL)
	ws := a.Executor.Stats()
	testkit.Await(t, time.Minute, "the executor to be ready", func() bool { ok, _ := ws.Readiness(); return ok })
	intent := func(key string, n int) *kgo.Record {
		v := `{"key":"` + key + `","effect":"sla-email","event":{"pad":"` + strings.Repeat("p", n) + `"}}`
		return &kgo.Record{Topic: "fx.effects", Key: []byte(key), Value: []byte(v)}
	}
	// 100 bytes under the limit as a record: the entry it starts as is over
	// it already, before any history.
	over := intent("over", 0)
	over = intent("over", (1<<20)-100-len(over.Key)-len(over.Value))
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerBatchMaxBytes(2<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, r := range []*kgo.Record{over, intent("after", 10)} {
		if err := cl.ProduceSync(context.Background(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Await(t, time.Minute, "the intent after it to succeed, or the worker to exit", func() bool {
		_, out := exited()
		return out || ws.Effects("sla-email", effect.Succeeded) >= 1
	})
	if err, out := exited(); out {
		t.Fatalf("the worker exited: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	if n, m := len(rc.calls("over")), len(rc.calls("after")); n != 0 || m != 1 {
		t.Errorf("calls: %d of the oversize intent (want 0), %d of the one after (want 1)", n, m)
	}
	dl, err := testkit.ReadAll(context.Background(), brokers, "fx.dlq")
	if err != nil {
		t.Fatal(err)
	}
	if len(dl) != 1 || string(dl[0].Key) != "over" || dlHeader(dl[0], "projector-reason") != sideeffects.ReasonTooLarge ||
		!strings.Contains(dlHeader(dl[0], "projector-error"), "ledger entry") {
		t.Fatalf("dead letters: want one for the oversize intent, too-large, naming the ledger entry; got %d", len(dl))
	}
}

func dlHeader(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}
