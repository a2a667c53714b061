package ingress_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/app/broker"
	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/ingress"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/receipt"
	"github.com/projector-dev/projector/internal/harness/testkit"
)

const workerConfig = `name: ing
kafka:
  brokers: [%s]
  instanceId: %s
  input: [events]
  transactionTimeout: 20s
state: {dir: %q}
http: {listen: "off"}
ingress:
  listen: 127.0.0.1:0
  timeout: 2s
  maxBodyBytes: 4KiB
  requireTenant: %v
projections:
  - name: overview
    topic: overview.v1
    events: {CaseOpened: merge, CaseUpdated: merge}
`

// worker is one running worker (processor + ingress) of the test.
type worker struct {
	app    *wiring.App
	url    string
	cancel context.CancelFunc // starts the shutdown
	stop   func()             // shuts down and waits
}

// startWorker runs a worker against brokers; hooks may hold its transactions.
func startWorker(t *testing.T, brokers, instance string, requireTenant bool, hooks *eos.Hooks, extraYAML ...string) *worker {
	t.Helper()
	src := fmt.Sprintf(workerConfig, brokers, instance, filepath.Join(t.TempDir(), "state"), requireTenant) + strings.Join(extraYAML, "")
	return startWorkerFrom(t, src, instance, hooks)
}

// startWorkerFrom runs a worker of the configuration src and waits until it
// is ready.
func startWorkerFrom(t *testing.T, src, instance string, hooks *eos.Hooks) *worker {
	t.Helper()
	cfg, err := config.Parse([]byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := wiring.New(cfg, wiring.Options{Hooks: hooks})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	w := &worker{app: a, cancel: cancel, stop: func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker %s: %v", instance, err)
		}
		a.Close()
	}}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			w.stop()
		}
	})
	<-a.Ingress.Listening()
	w.url = "http://" + a.Ingress.Addr().String()
	if err := testkit.WaitFor(context.Background(), 30*time.Second, func() bool { ok, _ := a.Ready(); return ok }); err != nil {
		_, why := a.Ready()
		t.Fatalf("worker %s not ready: %s", instance, why)
	}
	return w
}

type reply struct {
	code int
	hdr  http.Header
	body []byte
}

func post(t *testing.T, url, key, tenant, body string) reply {
	t.Helper()
	req, err := http.NewRequest("POST", url+"/v1/events", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(ingress.HeaderKey, key)
	}
	if tenant != "" {
		req.Header.Set(ingress.HeaderTenant, tenant)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) reply {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, b}
}

// problemField checks an RFC 9457 body naming field.
func problemField(t *testing.T, r reply, code int, field string) {
	t.Helper()
	if r.code != code {
		t.Fatalf("status %d, want %d: %s", r.code, code, r.body)
	}
	if ct := r.hdr.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q, want application/problem+json", ct)
	}
	var p struct {
		Type, Title, Detail, Field string
		Status                     int
	}
	if err := json.Unmarshal(r.body, &p); err != nil {
		t.Fatalf("problem body %s: %v", r.body, err)
	}
	if p.Status != code || p.Title == "" || p.Detail == "" || p.Field != field {
		t.Fatalf("problem %+v: want status %d naming field %q", p, code, field)
	}
}

type okBody struct {
	IdempotencyKey, TenantID, EventID, Outcome, Topic, Fingerprint string
	Partition                                                      int32
	Offset                                                         int64
	Projections                                                    map[string]string
	Events                                                         []struct {
		EventID, Outcome string
		Offset           int64
	}
}

func decodeOK(t *testing.T, r reply) okBody {
	t.Helper()
	var b okBody
	if err := json.Unmarshal(r.body, &b); err != nil {
		t.Fatalf("body %s: %v", r.body, err)
	}
	return b
}

// ingested counts the input records written by the ingress.
func ingested(t *testing.T, brokers []string) int {
	t.Helper()
	recs, err := testkit.ReadAll(context.Background(), brokers, "events")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		for _, h := range r.Headers {
			if h.Key == receipt.Header {
				n++
			}
		}
	}
	return n
}

// claimed counts the claims written by the ingress: one per request it
// wrote (decided by the processor, which forwards the winners' events).
func claimed(t *testing.T, brokers []string) int {
	t.Helper()
	recs, err := testkit.ReadAll(context.Background(), brokers, "ing.claims")
	if err != nil {
		t.Fatal(err)
	}
	return len(recs)
}

// TestIngressTable covers every row of the ingress table (docs/ingress.md)
// against a running worker on the embedded broker over TCP.
func TestIngressTable(t *testing.T) {
	t.Parallel() // mostly waits on held transactions
	b, brokers := testkit.Broker(t, 2, "events")
	var hold atomic.Bool
	release := make(chan struct{})
	hooks := &eos.Hooks{AfterStage: func() error {
		if hold.Load() {
			<-release
		}
		return nil
	}}
	w := startWorker(t, b.Addr(), "w1", true, hooks)

	const ev1 = `{"eventType":"CaseOpened","aggregateId":"C-1","aggregateVersion":1,"payload":{"a":1,"b":[1,2]}}`
	// 1. First request: 201 with the committed outcome, the event id and
	// the input position.
	first := post(t, w.url, "k-1", "t1", ev1)
	if first.code != 201 {
		t.Fatalf("first request: %d %s", first.code, first.body)
	}
	fb := decodeOK(t, first)
	if fb.Outcome != "applied" || fb.EventID != receipt.EventID("t1", "k-1", 0) || fb.Topic != "events" ||
		fb.Offset < 0 || fb.IdempotencyKey != "k-1" || fb.TenantID != "t1" || fb.Projections["overview"] != "applied" {
		t.Fatalf("first body %s", first.body)
	}
	if first.hdr.Get(ingress.HeaderReplayed) != "" {
		t.Fatal("a first request is marked replayed")
	}
	n := ingested(t, brokers)
	if n != 1 {
		t.Fatalf("%d ingested records after the first request, want 1", n)
	}

	// 2. Same tenant, key and payload: 200, the original body byte for
	// byte, Idempotent-Replayed, nothing produced; a re-serialised retry
	// (other member order and spacing, 1.0 for 1) is the same payload.
	for _, retry := range []string{ev1,
		`{ "payload" : {"b":[1,2.0],"a":1.0}, "aggregateVersion":1, "aggregateId":"C-1", "eventType":"CaseOpened" }`,
		`{"eventType":"CaseOpened","aggregateId":"C-1","aggregateVersion":1,"tenantId":"t1","payload":{"a":1,"b":[1,2]}}`,
	} {
		r := post(t, w.url, "k-1", "t1", retry)
		if r.code != 200 || !bytes.Equal(r.body, first.body) || r.hdr.Get(ingress.HeaderReplayed) != "true" {
			t.Fatalf("replay of %s: %d %q replayed=%q, want 200 and %s", retry, r.code, r.body, r.hdr.Get(ingress.HeaderReplayed), first.body)
		}
	}
	// 3. Same tenant and key, different payload: 409.
	r := post(t, w.url, "k-1", "t1", strings.Replace(ev1, `"a":1`, `"a":2`, 1))
	problemField(t, r, 409, "body")
	if r.hdr.Get("Retry-After") != "" {
		t.Fatal("a payload conflict says Retry-After: retrying cannot help")
	}
	if n := ingested(t, brokers); n != 1 {
		t.Fatalf("%d ingested records after replays and a conflict, want 1", n)
	}
	// 4. Same key, another tenant: independent.
	r = post(t, w.url, "k-1", "t2", strings.Replace(ev1, "C-1", "C-2", 1))
	if r.code != 201 || decodeOK(t, r).EventID != receipt.EventID("t2", "k-1", 0) || decodeOK(t, r).Outcome != "applied" {
		t.Fatalf("same key, other tenant: %d %s", r.code, r.body)
	}

	// 5. Same key while the first is in flight: 409 with Retry-After. The
	// processor's commit is held, so the first request waits for its
	// receipt while the second arrives.
	hold.Store(true)
	const ev3 = `{"eventType":"CaseOpened","aggregateId":"C-3","aggregateVersion":1,"payload":{}}`
	firstDone := make(chan reply, 1)
	go func() { firstDone <- post(t, w.url, "k-3", "t1", ev3) }()
	testkit.Await(t, 30*time.Second, "the first request to be in flight", func() bool { return claimed(t, brokers) == 3 })
	r = post(t, w.url, "k-3", "t1", ev3)
	problemField(t, r, 409, ingress.HeaderKey)
	if r.hdr.Get("Retry-After") == "" {
		t.Fatal("409 in flight without Retry-After")
	}
	// 6. Commit not seen within ingress.timeout (2s): 202 with a Location
	// to poll, which answers 404 until the commit, then the same body a
	// replay gets.
	pending := <-firstDone
	if pending.code != 202 || pending.hdr.Get("Location") == "" {
		t.Fatalf("held commit: %d %s, want 202 with Location", pending.code, pending.body)
	}
	loc := pending.hdr.Get("Location")
	req, _ := http.NewRequest("GET", w.url+loc, nil)
	req.Header.Set(ingress.HeaderTenant, "t1")
	problemField(t, do(t, req), 404, "key")
	hold.Store(false)
	close(release)
	var polled reply
	polled202 := 0 // the key decided, its event's receipt not read yet
	testkit.Await(t, 30*time.Second, "the receipt after the commit", func() bool {
		req, _ := http.NewRequest("GET", w.url+loc, nil)
		polled = do(t, req) // the Location carries the tenant
		if polled.code == 202 {
			polled202++
		}
		return polled.code == 200
	})
	replay := post(t, w.url, "k-3", "t1", ev3)
	if replay.code != 200 || !bytes.Equal(replay.body, polled.body) || decodeOK(t, replay).Outcome != "applied" {
		t.Fatalf("after 202: poll %s, replay %d %s", polled.body, replay.code, replay.body)
	}

	// 7. Bad input: 400 (headers, not JSON) and 422 (not an envelope),
	// each naming the field; 413 over the size limit.
	problemField(t, post(t, w.url, "", "t1", ev1), 400, ingress.HeaderKey)
	problemField(t, post(t, w.url, strings.Repeat("k", 256), "t1", ev1), 400, ingress.HeaderKey)
	problemField(t, post(t, w.url, "kü", "t1", ev1), 400, ingress.HeaderKey)
	problemField(t, post(t, w.url, "k-7", "", ev1), 400, ingress.HeaderTenant)
	problemField(t, post(t, w.url, "k-7", "t1", `{"eventType":`), 400, "body")
	problemField(t, post(t, w.url, "k-7", "t1", `[1,2]`), 422, "body")
	problemField(t, post(t, w.url, "k-7", "t1", `{"eventType":"CaseOpened","aggregateVersion":1}`), 422, "aggregateId")
	problemField(t, post(t, w.url, "k-7", "t1", `{"eventType":"CaseOpened","aggregateId":"C-7","aggregateVersion":0}`), 422, "aggregateVersion")
	problemField(t, post(t, w.url, "k-7", "t1", `{"eventId":"mine","eventType":"CaseOpened","aggregateId":"C-7"}`), 422, "eventId")
	problemField(t, post(t, w.url, "k-7", "t1", `{"tenantId":"t9","eventType":"CaseOpened","aggregateId":"C-7"}`), 422, "tenantId")
	problemField(t, post(t, w.url, "k-7", "t1", `{"events":[{"eventType":"CaseOpened","aggregateId":"C-7"},{"eventType":"CaseOpened"}]}`), 422, "events[1].aggregateId")
	problemField(t, post(t, w.url, "k-7", "t1", `{"events":[]}`), 422, "events")
	big := `{"eventType":"CaseOpened","aggregateId":"C-7","payload":"` + strings.Repeat("x", 5000) + `"}`
	problemField(t, post(t, w.url, "k-7", "t1", big), 413, "body")
	if n := ingested(t, brokers); n != 3 {
		t.Fatalf("%d ingested records after bad requests, want 3", n)
	}

	// 8. A batch: one key, events key+index; replayed whole, refused when
	// any event or the count changes.
	batch := `{"events":[{"eventType":"CaseOpened","aggregateId":"C-8","aggregateVersion":1,"payload":{"x":1}},` +
		`{"eventType":"CaseUpdated","aggregateId":"C-8","aggregateVersion":2,"payload":{"y":2}}]}`
	br := post(t, w.url, "k-8", "t1", batch)
	bb := decodeOK(t, br)
	if br.code != 201 || len(bb.Events) != 2 || bb.Events[0].EventID != receipt.EventID("t1", "k-8", 0) ||
		bb.Events[1].EventID != receipt.EventID("t1", "k-8", 1) || bb.Events[1].Outcome != "applied" {
		t.Fatalf("batch: %d %s", br.code, br.body)
	}
	if r := post(t, w.url, "k-8", "t1", batch); r.code != 200 || !bytes.Equal(r.body, br.body) {
		t.Fatalf("batch replay: %d %s", r.code, r.body)
	}
	problemField(t, post(t, w.url, "k-8", "t1", strings.Replace(batch, `"y":2`, `"y":3`, 1)), 409, "events[1]")
	problemField(t, post(t, w.url, "k-8", "t1", `{"events":[{"eventType":"CaseOpened","aggregateId":"C-8","aggregateVersion":1,"payload":{"x":1}}]}`), 409, ingress.HeaderKey)
	problemField(t, post(t, w.url, "k-8", "t1", `{"eventType":"CaseOpened","aggregateId":"C-8","aggregateVersion":1,"payload":{"x":1}}`), 409, ingress.HeaderKey)

	// 9. A second instance answers a replay it never saw the first request
	// of, byte for byte, once its receipts view has caught up.
	w2 := startWorker(t, b.Addr(), "w2", true, nil)
	for _, c := range []struct {
		key, tenant, body string
		want              []byte
	}{{"k-1", "t1", ev1, first.body}, {"k-8", "t1", batch, br.body}} {
		if r := post(t, w2.url, c.key, c.tenant, c.body); r.code != 200 || !bytes.Equal(r.body, c.want) {
			t.Fatalf("replay of %s on a second instance: %d %s, want %s", c.key, r.code, r.body, c.want)
		}
	}
	problemField(t, post(t, w2.url, "k-1", "t1", strings.Replace(ev1, `"a":1`, `"a":2`, 1)), 409, "body")

	// Exactly one projection record per accepted event: C-1 v1, C-2 v1,
	// C-3 v1, C-8 v1 and v2.
	recs, err := testkit.ReadAll(context.Background(), brokers, "overview.v1")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, r := range recs {
		got[string(r.Key)]++
	}
	if fmt.Sprint(got) != "map[C-1:1 C-2:1 C-3:1 C-8:2]" {
		t.Fatalf("projection records per aggregate %v", got)
	}
	// Metrics: counted by status code.
	reg := w.app.Registry
	if c := counter(t, reg, "201"); c != 3 {
		t.Errorf("projector_ingress_requests_total{code=201} = %v, want 3", c)
	}
	if c := counter(t, reg, "409"); c != 5 {
		t.Errorf("projector_ingress_requests_total{code=409} = %v, want 5", c)
	}
	if c := counter(t, reg, "202"); c != float64(1+polled202) {
		t.Errorf("projector_ingress_requests_total{code=202} = %v, want %d (a POST and %d polls)", c, 1+polled202, polled202)
	}
}

// TestIngressUnavailable: an ingress whose receipts view has not caught up
// (here: no broker at all) answers 503 with Retry-After, and is not ready.
func TestIngressUnavailable(t *testing.T) {
	s, err := ingress.New(ingress.Config{Listen: "127.0.0.1:0", Topic: "events", ReceiptsTopic: "r", ClaimsTopic: "c", Brokers: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.Ready(); ok {
		t.Fatal("ready before its receipts are read")
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	r := post(t, srv.URL, "k", "", `{"eventType":"A","aggregateId":"x"}`)
	problemField(t, r, 503, "")
	if r.hdr.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
}

// counter reads projector_ingress_requests_total{code} from reg.
func counter(t *testing.T, reg prometheus.Gatherer, code string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "projector_ingress_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "code" && l.GetValue() == code {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no projector_ingress_requests_total{code=%q}", code)
	return 0
}

// TestIngressRaceSettledByProcessor: two instances that each took the first
// request of a key (one with another payload) both write it; the processor
// applies the first, dead-letters the second as a conflict and keeps the
// first receipt, so every instance then answers the first payload 200 and
// the other 409.
func TestIngressRaceSettledByProcessor(t *testing.T) {
	b, brokers := testkit.Broker(t, 2, "events")
	ctx := context.Background()
	id := receipt.EventID("t1", "race", 0)
	origin, _ := json.Marshal(receipt.Origin{TenantID: "t1", Key: "race", Index: 0, Count: 1})
	p1 := `{"eventId":"` + id + `","tenantId":"t1","eventType":"CaseOpened","aggregateId":"R-1","aggregateVersion":1,"payload":{"p":1}}`
	p2 := strings.Replace(p1, `"p":1`, `"p":2`, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, v := range []string{p1, p2, p1} { // the first wins; a conflict and a duplicate follow
		rec := &kgo.Record{Topic: "events", Key: []byte("R-1"), Value: []byte(v), Headers: []kgo.RecordHeader{{Key: receipt.Header, Value: origin}}}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	w := startWorker(t, b.Addr(), "w1", true, nil)
	body1 := `{"eventType":"CaseOpened","aggregateId":"R-1","aggregateVersion":1,"payload":{"p":1}}`
	// Wait until this instance has read the receipt (a POST before that
	// would write the event once more, a duplicate, and still answer 200).
	testkit.Await(t, 30*time.Second, "the receipt", func() bool {
		req, _ := http.NewRequest("GET", w.url+"/v1/receipts/race?tenant=t1", nil)
		return do(t, req).code == 200
	})
	r := post(t, w.url, "race", "t1", body1)
	if r.code != 200 {
		t.Fatalf("replay: %d %s", r.code, r.body)
	}
	ev1, _ := envelope.Decode([]byte(p1), 0)
	fp := ev1.Fingerprint()
	if got := decodeOK(t, r); got.Fingerprint != hex.EncodeToString(fp[:]) || got.EventID != id || got.Outcome != "applied" || got.Offset != 0 {
		t.Fatalf("replay %s: want the first record's receipt", r.body)
	}
	problemField(t, post(t, w.url, "race", "t1", strings.Replace(body1, `"p":1`, `"p":2`, 1)), 409, "body")
	recs, err := testkit.ReadAll(ctx, brokers, "ing.receipts")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 {
		t.Fatalf("%d receipts for one key, want 1 (a conflict or duplicate must not write one)", len(recs))
	}
	dl, err := testkit.ReadAll(ctx, brokers, "ing.dlq")
	if err != nil {
		t.Fatal(err)
	}
	if len(dl) != 1 || string(dl[0].Value) != p2 {
		t.Fatalf("dead letters %d, want the second payload as a conflict", len(dl))
	}
	if n := ingested(t, brokers); n != 3 {
		t.Fatalf("%d ingested records, want 3: the replay must not write", n)
	}
}

// TestIngressDrainOnShutdown: on shutdown the ingress stops accepting and a
// request waiting for its receipt is answered 202 at once (its event is
// written; the client polls or retries), and Run returns.
func TestIngressDrainOnShutdown(t *testing.T) {
	b, brokers := testkit.Broker(t, 2, "events")
	var hold atomic.Bool
	release := make(chan struct{})
	hooks := &eos.Hooks{AfterStage: func() error {
		if hold.Load() {
			<-release
		}
		return nil
	}}
	w := startWorker(t, b.Addr(), "w1", false, hooks)
	hold.Store(true)
	answered := make(chan reply, 1)
	go func() {
		answered <- post(t, w.url, "k-d", "", `{"eventType":"CaseOpened","aggregateId":"D-1","aggregateVersion":1}`)
	}()
	testkit.Await(t, 30*time.Second, "the request to be in flight", func() bool { return claimed(t, brokers) == 1 })
	start := time.Now()
	w.cancel()
	select {
	case r := <-answered:
		if r.code != 202 || r.hdr.Get("Location") != "/v1/receipts/k-d" {
			t.Fatalf("drained request: %d %s, want 202 with its Location", r.code, r.body)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("drained request answered after %s, want at once (the timeout is 2s)", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting request was not answered on shutdown")
	}
	testkit.Await(t, 30*time.Second, "the listener to close", func() bool {
		resp, err := http.Post(w.url+"/v1/events", "application/json", strings.NewReader("{}"))
		if err == nil {
			resp.Body.Close()
		}
		return err != nil
	})
	close(release)
	w.stop()
}

// TestIngressReceiptOutlivesDedup: a retry after the key's dedup entry has
// expired is answered from the receipt, byte for byte, and writes nothing;
// the processor alone would take the same record for a new event (it writes
// a second receipt for it), so the receipt check is what keeps it out.
func TestIngressReceiptOutlivesDedup(t *testing.T) {
	t.Parallel() // mostly waits for the dedup retention to pass
	b, brokers := testkit.Broker(t, 2, "events")
	ctx := context.Background()
	w := startWorker(t, b.Addr(), "w1", false, nil, "dedup: {retention: 1s}\n")
	const body = `{"eventType":"CaseOpened","aggregateId":"E-1","aggregateVersion":1,"payload":{"e":1}}`
	first := post(t, w.url, "k-e", "", body)
	if first.code != 201 {
		t.Fatalf("first: %d %s", first.code, first.body)
	}
	time.Sleep(1500 * time.Millisecond) // sleep ok: real time must pass the 1 s dedup retention (no injected clock here); the retry is the check
	r := post(t, w.url, "k-e", "", body)
	if r.code != 200 || !bytes.Equal(r.body, first.body) || r.hdr.Get(ingress.HeaderReplayed) != "true" {
		t.Fatalf("retry after the dedup retention: %d %s, want 200 and %s", r.code, r.body, first.body)
	}
	problemField(t, post(t, w.url, "k-e", "", strings.Replace(body, `"e":1`, `"e":2`, 1)), 409, "body")
	if n := ingested(t, brokers); n != 1 {
		t.Fatalf("%d ingested records, want 1", n)
	}
	// The same record written again without the ingress: the dedup entry
	// has expired, so the processor sees a new event id.
	recs, err := testkit.ReadAll(ctx, brokers, "events")
	if err != nil || len(recs) != 1 {
		t.Fatalf("input: %d records, %v", len(recs), err)
	}
	again := &kgo.Record{Topic: "events", Key: recs[0].Key, Value: recs[0].Value, Headers: recs[0].Headers}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, again).FirstErr(); err != nil {
		t.Fatal(err)
	}
	testkit.Await(t, 30*time.Second, "a second receipt (the expired id taken as new)", func() bool {
		rs, err := testkit.ReadAll(ctx, brokers, "ing.receipts")
		events := 0 // the key's claim receipt aside
		for _, r := range rs {
			if len(r.Headers) == 0 {
				events++
			}
		}
		return err == nil && events == 2
	})
	// The view keeps the first receipt: the answer does not change.
	if r := post(t, w.url, "k-e", "", body); r.code != 200 || !bytes.Equal(r.body, first.body) {
		t.Fatalf("after a second receipt: %d %s, want the first body", r.code, r.body)
	}
}

// TestIngressBrokerGone: a running worker whose brokers are gone answers a
// new request 503 with Retry-After within ingress.timeout (the write could
// not be made), never a guess.
func TestIngressBrokerGone(t *testing.T) {
	t.Parallel() // mostly waits on a broker that is gone
	b, err := broker.Start(broker.Options{Listen: "127.0.0.1:0", Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := testkit.CreateTopic(context.Background(), []string{b.Addr()}, "events", 2); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse([]byte(fmt.Sprintf(workerConfig, b.Addr(), "w1", filepath.Join(t.TempDir(), "state"), false)), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, err := wiring.New(cfg, wiring.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	defer func() {
		cancel()
		select { // the worker's own errors without a broker are not this test's
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("the worker did not stop within 30s of its context")
		}
	}()
	<-a.Ingress.Listening()
	url := "http://" + a.Ingress.Addr().String()
	testkit.Await(t, 30*time.Second, "ready", func() bool { ok, _ := a.Ready(); return ok })
	if r := post(t, url, "k-1", "", `{"eventType":"CaseOpened","aggregateId":"G-1","aggregateVersion":1}`); r.code != 201 {
		t.Fatalf("before: %d %s", r.code, r.body)
	}
	b.Close()
	start := time.Now()
	r := post(t, url, "k-2", "", `{"eventType":"CaseOpened","aggregateId":"G-2","aggregateVersion":1}`)
	problemField(t, r, 503, "")
	if r.hdr.Get("Retry-After") == "" || time.Since(start) > 5*time.Second {
		t.Fatalf("503 after %s, Retry-After %q: want it within the 2s timeout, with Retry-After", time.Since(start), r.hdr.Get("Retry-After"))
	}
	// A replay is still answered from the receipts already read.
	if r := post(t, url, "k-1", "", `{"eventType":"CaseOpened","aggregateId":"G-1","aggregateVersion":1}`); r.code != 200 {
		t.Fatalf("replay with the broker gone: %d %s", r.code, r.body)
	}
}
