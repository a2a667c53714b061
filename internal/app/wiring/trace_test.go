package wiring_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/app/ingress"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/operator/rebuild"
)

// traceConfig: an envelope topic (also the ingress's), a CloudEvents topic,
// one versioned projection and a webhook on every applied event. %s:
// broker, state dir, ingress address, webhook URL.
const traceConfig = `name: tr
kafka:
  brokers: [%s]
  instanceId: tr-1
  input:
    - tr.events
    - {topic: tr.ce, format: cloudevents}
  deadLetterTopic: tr.dlq
  effectsTopic: tr.effects
state: {dir: %q}
http: {listen: "off"}
ingress: {listen: %q, receiptsTopic: tr.receipts, timeout: 60s}
gaps: {holdTimeout: 10m}
projections:
  - {name: orders, topic: tr.orders.v1, events: {OrderPlaced: merge}}
sideEffects:
  - {name: notify, on: [OrderPlaced], key: "n:{aggregateId}:v{aggregateVersion}", webhook: {url: %q, timeout: 5s}, maxAttempts: 3}
`

// traceTopics are the topics the trace test's worker reads and writes.
var traceTopics = []string{"tr.events", "tr.ce", "tr.dlq", "tr.effects", "tr.orders.v1"}

// tp is a valid traceparent whose trace id ends in n.
func tp(n int) string {
	return fmt.Sprintf("00-4bf92f3577b34da6a3ce929d0e0e%04x-00f067aa0ba902b7-01", n)
}

// traced is what one event's outputs must carry: its traceparent and
// tracestate, both "" for none.
type traced struct{ parent, state string }

// TestTraceContextEndToEnd: a W3C trace context in the input reaches every
// output of the event, through the worker on the embedded broker: the
// projection record's headers, the intent record's headers and the webhook
// request's headers. The input carries it as traceparent/tracestate headers
// on an envelope topic (including an event held for a gap, which drains
// from its stored wrapper), as the CloudEvents distributed-tracing
// extension (binary and structured mode, written by the SDK), and as an
// ingress request's headers, which the ingress puts on the record it
// produces. An event without one, or with an invalid one (W3C: ignored),
// gets none on its outputs. A rebuild's projection records carry the same
// headers as live's.
func TestTraceContextEndToEnd(t *testing.T) {
	hook := newTraceReceiver(t)
	a, brokers := startTraceWorker(t, hook.URL)
	ctx := context.Background()

	env := func(agg string, v int, hs ...string) *kgo.Record {
		r := &kgo.Record{Topic: "tr.events", Key: []byte(agg), Value: fmt.Appendf(nil,
			`{"eventId":"%s-%d","eventType":"OrderPlaced","aggregateId":%q,"aggregateVersion":%d,"payload":{"n":%d}}`, agg, v, agg, v, v)}
		for i := 0; i+1 < len(hs); i += 2 {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: hs[i], Value: []byte(hs[i+1])})
		}
		return r
	}
	ce := func(agg string, v int, structured bool, parent, state string) *kgo.Record {
		e := ceEvent(t, agg, order{v, fmt.Sprintf("%s-%d", agg, v), v})
		e.SetExtension("traceparent", parent)
		e.SetExtension("tracestate", state)
		r := ceRecordOf(t, agg, e, structured)
		r.Topic = "tr.ce"
		return r
	}
	want := map[string]traced{ // by "<aggregate>:v<version>"
		"env:v1": {tp(1), "vendor=a"}, "env:v2": {tp(2), ""}, "env:v3": {tp(3), "vendor=c"},
		"plain:v1": {}, "bad:v1": {},
		"ceb:v1": {tp(4), "ce=b"}, "ces:v1": {tp(5), "ce=s"},
		"ing:v1": {tp(6), "ing=1"}, "ingbad:v1": {},
	}
	recs := []*kgo.Record{
		env("env", 1, "traceparent", tp(1), "tracestate", "vendor=a"),
		env("env", 3, "traceparent", tp(3), "tracestate", "vendor=c"), // held: 2 is missing
		env("env", 2, "traceparent", tp(2)),                           // fills the gap: 3 drains
		env("plain", 1),
		env("bad", 1, "traceparent", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "tracestate", "x=y"),
		ce("ceb", 1, false, tp(4), "ce=b"),
		ce("ces", 1, true, tp(5), "ce=s"),
	}
	if err := testkit.ProduceRecords(ctx, brokers, 1<<20, recs...); err != nil {
		t.Fatal(err)
	}
	addr := "http://" + a.Ingress.Addr().String()
	postTraced(t, addr, "ing", tp(6), "ing=1")
	postTraced(t, addr, "ingbad", "01-zz", "ing=bad")

	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := testkit.WaitCaughtUp(wctx, brokers, "tr", "tr.events", "tr.ce"); err != nil {
		t.Fatal(err)
	}
	testkit.Await(t, 2*time.Minute, "a webhook call per event", func() bool { return hook.count() == len(want) })

	// The ingress's records on its topic carry the request's context.
	inputs, err := testkit.ReadAll(wctx, brokers, "tr.events")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range inputs {
		switch string(r.Key) {
		case "ing", "ingbad":
			checkTrace(t, "the ingress's record of "+string(r.Key), r.Headers, want[string(r.Key)+":v1"])
		}
	}
	projected, err := testkit.ReadAll(wctx, brokers, "tr.orders.v1")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, r := range projected {
		var v struct {
			Version int `json:"version"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("projection record %s: %v", r.Value, err)
		}
		k := fmt.Sprintf("%s:v%d", r.Key, v.Version)
		seen[k] = true
		checkTrace(t, "projection record "+k, r.Headers, want[k])
	}
	intents, err := testkit.ReadAll(wctx, brokers, "tr.effects")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range intents {
		k := strings.TrimPrefix(string(r.Key), "n:")
		seen["intent "+k] = true
		checkTrace(t, "intent "+string(r.Key), r.Headers, want[k])
	}
	// A rebuild's projection records carry the same headers.
	res, err := rebuild.Run(wctx, rebuild.Options{Config: a.Config, Topic: "tr.orders.v2", Brokers: brokers,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil || !res.Completed {
		t.Fatalf("rebuild: %+v, %v", res, err)
	}
	rebuilt, err := testkit.ReadAll(wctx, brokers, "tr.orders.v2")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rebuilt {
		var v struct {
			Version int `json:"version"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("rebuilt record %s: %v", r.Value, err)
		}
		k := fmt.Sprintf("%s:v%d", r.Key, v.Version)
		seen["rebuilt "+k] = true
		checkTrace(t, "rebuilt projection record "+k, r.Headers, want[k])
	}
	for k, w := range want {
		if !seen["rebuilt "+k] {
			t.Errorf("%s: no rebuilt projection record", k)
		}
		if !seen[k] || !seen["intent "+k] {
			t.Errorf("%s: a projection record %v, an intent %v; want both", k, seen[k], seen["intent "+k])
		}
		got := hook.call("n:" + k)
		if got.parent != w.parent || got.state != w.state {
			t.Errorf("webhook call n:%s: traceparent %q, tracestate %q; want %q, %q", k, got.parent, got.state, w.parent, w.state)
		}
	}
}

// checkTrace checks the traceparent and tracestate headers of one record.
func checkTrace(t *testing.T, what string, hs []kgo.RecordHeader, want traced) {
	t.Helper()
	var got traced
	n := 0
	for _, h := range hs {
		switch h.Key {
		case "traceparent":
			got.parent, n = string(h.Value), n+1
		case "tracestate":
			got.state, n = string(h.Value), n+1
		}
	}
	wantN := 0
	if want.parent != "" {
		wantN++
	}
	if want.state != "" {
		wantN++
	}
	if got != want || n != wantN {
		t.Errorf("%s: %d trace headers, traceparent %q, tracestate %q; want %q, %q", what, n, got.parent, got.state, want.parent, want.state)
	}
}

// postTraced posts one event for aggregate agg through the ingress with
// the given traceparent and tracestate headers, and waits for its 201
// (applied).
func postTraced(t *testing.T, addr, agg, parent, state string) {
	t.Helper()
	body := fmt.Sprintf(`{"eventType":"OrderPlaced","aggregateId":%q,"aggregateVersion":1,"payload":{"via":"ingress"}}`, agg)
	req, _ := http.NewRequest("POST", addr+"/v1/events", strings.NewReader(body))
	req.Header.Set(ingress.HeaderKey, agg)
	req.Header.Set("traceparent", parent)
	req.Header.Set("tracestate", state)
	resp, err := (&http.Client{Timeout: 90 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST %s: %d %s", agg, resp.StatusCode, b)
	}
}

// traceReceiver is a webhook receiver that keeps each idempotency key's
// first call's trace headers and answers 200.
type traceReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	calls map[string]traced
}

func newTraceReceiver(t *testing.T) *traceReceiver {
	rc := &traceReceiver{calls: map[string]traced{}}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		rc.mu.Lock()
		k := r.Header.Get("Idempotency-Key")
		if _, ok := rc.calls[k]; !ok {
			rc.calls[k] = traced{r.Header.Get("traceparent"), r.Header.Get("tracestate")}
		}
		rc.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *traceReceiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.calls)
}

func (rc *traceReceiver) call(key string) traced {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.calls[key]
}

func startTraceWorker(t *testing.T, hookURL string) (*wiring.App, []string) {
	t.Helper()
	return startTraceWorkerWith(t, hookURL, wiring.Options{})
}

// startTraceWorkerWith is startTraceWorker with options.
func startTraceWorkerWith(t *testing.T, hookURL string, o wiring.Options) (*wiring.App, []string) {
	t.Helper()
	b, brokers := testkit.Broker(t, 1, traceTopics...)
	src := fmt.Sprintf(traceConfig, b.Addr(), filepath.Join(t.TempDir(), "state"), anyPort, hookURL)
	a := runWorkerWith(t, src, o)
	<-a.Ingress.Listening()
	testkit.Await(t, time.Minute, "the worker to be ready", func() bool { ok, _ := a.Ready(); return ok })
	return a, brokers
}
