package ingress_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/app/broker"
	"github.com/projector-dev/projector/internal/app/ingress"
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/receipt"
	"github.com/projector-dev/projector/internal/harness/testkit"
)

// claimConfig is a worker whose projection fires a side effect for every
// applied event, so that a second applied event would show as a second
// intent too. Its arguments: brokers, instance id, state dir, the ingress
// timeout and the webhook's URL.
const claimConfig = `name: ing
kafka:
  brokers: [%s]
  instanceId: %s
  input: [events]
  transactionTimeout: 30s
state: {dir: %q}
http: {listen: "off"}
ingress:
  listen: 127.0.0.1:0
  timeout: %s
projections:
  - name: overview
    topic: overview.v1
    events: {CaseOpened: merge}
sideEffects:
  - name: notify
    on: [CaseOpened]
    key: "notify:{aggregateId}"
    webhook: {url: %q}
`

// client is a well-behaved ingress client (docs/ingress.md, the retry
// rule per status): it sends one request until it gets a final answer,
// retrying a refused connection, a 5xx, a 202 and a 409 with Retry-After
// with the same key and body. Each 202 is reported to accepted, and a
// retry after a 202 waits for polled (closed: poll now).
type client struct {
	hc       *http.Client
	accepted func()
	polled   <-chan struct{}
}

func (c *client) send(url, key, tenant, body string) (reply, error) {
	for tries := 0; tries < 2000; tries++ {
		req, err := http.NewRequest("POST", url+"/v1/events", strings.NewReader(body))
		if err != nil {
			return reply{}, err
		}
		req.Header.Set(ingress.HeaderKey, key)
		req.Header.Set(ingress.HeaderTenant, tenant)
		resp, err := c.hc.Do(req)
		if err != nil {
			time.Sleep(20 * time.Millisecond) // sleep ok: the client's retry pause
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		r := reply{resp.StatusCode, resp.Header, b}
		switch {
		case err != nil, r.code >= 500, r.code == http.StatusConflict && r.hdr.Get("Retry-After") != "":
			time.Sleep(20 * time.Millisecond) // sleep ok: the client's retry pause
		case r.code == http.StatusAccepted:
			if c.accepted != nil {
				c.accepted()
			}
			if c.polled != nil {
				<-c.polled
			}
			time.Sleep(20 * time.Millisecond) // sleep ok: the client's pause before it polls again
		default:
			return r, nil
		}
	}
	return reply{}, fmt.Errorf("key %s: no final answer after 2000 tries", key)
}

// claimWorkers runs n workers of claimConfig on broker addr, each with its
// own state directory under dir and the hooks given (nil: none).
func claimWorkers(t *testing.T, addr, dir, timeout, sink string, n int, hooks *eos.Hooks) []*worker {
	t.Helper()
	ws := make([]*worker, n)
	for i := range ws {
		id := fmt.Sprintf("w%d", i)
		ws[i] = startWorkerFrom(t, fmt.Sprintf(claimConfig, addr, id, filepath.Join(dir, id), timeout, sink), id, hooks)
	}
	return ws
}

// waitProcessed waits until the processor's group has committed an offset
// past every record of topic written so far. (testkit.WaitCaughtUp wants
// the end offsets, which a transaction's marker after the last record
// keeps one ahead of the group's when the topic is written
// transactionally, as the claims' events are.)
func waitProcessed(t *testing.T, brokers []string, topic string) {
	t.Helper()
	recs, err := testkit.ReadAll(context.Background(), brokers, topic)
	if err != nil {
		t.Fatal(err)
	}
	next := map[int32]int64{}
	for _, r := range recs {
		next[r.Partition] = max(next[r.Partition], r.Offset+1)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	testkit.Await(t, 30*time.Second, "the processor's group past every record of "+topic, func() bool {
		committed, err := adm.FetchOffsets(context.Background(), "ing")
		if err != nil {
			return false
		}
		for p, n := range next {
			if c, ok := committed.Lookup(topic, p); !ok || c.At < n {
				return false
			}
		}
		return true
	})
}

// TestIngressOneKeyOneEvent (issue 23, defect 1): 16 clients send 16
// different bodies, one aggregate each, under one Idempotency-Key at once,
// on one instance and spread over two. The processors are held until every
// request has been written (each answered 202 once), so that no answer
// from a receipt can keep a body out. Exactly one body is applied: one
// projection record over the 16 aggregates and one intent; its client is
// answered 2xx and the 15 others 409. After the receipts and claims are
// compacted and the instances restarted, every instance (and a new one)
// answers the key with the bytes the winner was answered.
func TestIngressOneKeyOneEvent(t *testing.T) {
	for _, n := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d-instances", n), func(t *testing.T) {
			// Parallel: each waits mostly on its workers' joins and
			// restarts, on a broker of its own.
			t.Parallel()
			testOneKeyOneEvent(t, n)
		})
	}
}

func testOneKeyOneEvent(t *testing.T, instances int) {
	const bodies = 16
	b, brokers := testkit.Broker(t, 4, "events")
	ctx := context.Background()
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	t.Cleanup(sink.Close)
	var hold atomic.Bool
	release := make(chan struct{})
	hooks := &eos.Hooks{AfterStage: func() error {
		if hold.Load() {
			<-release
		}
		return nil
	}}
	dir := t.TempDir()
	ws := claimWorkers(t, b.Addr(), dir, "400ms", sink.URL, instances, hooks)
	body := func(i int) string {
		return fmt.Sprintf(`{"eventType":"CaseOpened","aggregateId":"A-%d","aggregateVersion":1,"payload":{"n":%d}}`, i, i)
	}

	hold.Store(true)
	var written [bodies]atomic.Bool
	finals := make([]reply, bodies)
	var wg sync.WaitGroup
	for i := range bodies {
		c := &client{hc: &http.Client{Timeout: 20 * time.Second}, accepted: func() { written[i].Store(true) }, polled: release}
		wg.Go(func() {
			r, err := c.send(ws[i%instances].url, "K", "t1", body(i))
			if err != nil {
				t.Error(err)
			}
			finals[i] = r
		})
	}
	testkit.Await(t, 30*time.Second, "every body written (answered 202 once)", func() bool {
		for i := range written {
			if !written[i].Load() {
				return false
			}
		}
		return true
	})
	hold.Store(false)
	close(release)
	wg.Wait()
	waitProcessed(t, brokers, "events")

	winner := -1
	for i, f := range finals {
		switch {
		case f.code == http.StatusOK || f.code == http.StatusCreated:
			if winner >= 0 {
				t.Errorf("bodies %d and %d were both answered 2xx: %s / %s", winner, i, finals[winner].body, f.body)
			}
			winner = i
		case f.code == http.StatusConflict:
			problemField(t, f, http.StatusConflict, "body")
		default:
			t.Errorf("body %d answered %d %s", i, f.code, f.body)
		}
	}
	recs, err := testkit.ReadAll(ctx, brokers, "overview.v1")
	if err != nil {
		t.Fatal(err)
	}
	var applied []string
	for _, r := range recs {
		applied = append(applied, string(r.Key))
	}
	intents, err := testkit.ReadAll(ctx, brokers, "ing.effects")
	if err != nil {
		t.Fatal(err)
	}
	var fired []string
	for _, r := range intents {
		fired = append(fired, string(r.Key))
	}
	t.Logf("%d instance(s): winner %d; projection records %v; intents %v", instances, winner, applied, fired)
	if winner < 0 {
		t.Fatal("no body was answered 2xx")
	}
	if want := fmt.Sprintf("A-%d", winner); len(applied) != 1 || len(fired) != 1 || applied[0] != want || fired[0] != "notify:"+want {
		t.Errorf("projection records %v and intents %v for one key, want exactly one of each, of %s (the body answered 2xx)", applied, fired, want)
	}
	won := finals[winner].body

	// Compaction, then a restart of every instance, plus a new one: all
	// answer the key as before, byte for byte.
	for _, w := range ws {
		w.stop()
	}
	b.Cluster.Compact()
	ws = claimWorkers(t, b.Addr(), dir, "10s", sink.URL, instances, nil)
	ws = append(ws, startWorkerFrom(t, fmt.Sprintf(claimConfig, b.Addr(), "fresh", filepath.Join(dir, "fresh"), "10s", sink.URL), "fresh", nil))
	for j, w := range ws {
		if r := post(t, w.url, "K", "t1", body(winner)); r.code != http.StatusOK || !bytes.Equal(r.body, won) {
			t.Errorf("instance %d after the restart: the winning body answered %d %s, want 200 and %s", j, r.code, r.body, won)
		}
		req, _ := http.NewRequest("GET", w.url+"/v1/receipts/K?tenant=t1", nil)
		if r := do(t, req); r.code != http.StatusOK || !bytes.Equal(r.body, won) {
			t.Errorf("instance %d after the restart: GET answered %d %s, want 200 and %s", j, r.code, r.body, won)
		}
		problemField(t, post(t, w.url, "K", "t1", body((winner+1)%bodies)), http.StatusConflict, "body")
	}

	// The decision is state, restored from the claims' changelog: a new
	// instance with an empty state directory, alone (it owns every
	// partition), forwards nothing for a claim of the key that no ingress
	// would write (a copy with another body, made by hand).
	for _, w := range ws {
		w.stop()
	}
	alone := startWorkerFrom(t, fmt.Sprintf(claimConfig, b.Addr(), "alone", filepath.Join(dir, "alone"), "10s", sink.URL), "alone", nil)
	late := &receipt.Claim{TenantID: "t1", Key: "K", Request: "by-hand", Events: []json.RawMessage{[]byte(
		`{"eventId":"` + receipt.EventID("t1", "K", 0) + `","tenantId":"t1","eventType":"CaseOpened","aggregateId":"A-late","aggregateVersion":1}`)}}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "ing.claims", Key: []byte(receipt.ClaimKey("t1", "K")), Value: receipt.AppendClaim(nil, late)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitProcessed(t, brokers, "ing.claims")
	if recs, err := testkit.ReadAll(ctx, brokers, "overview.v1"); err != nil || len(recs) != 1 {
		t.Errorf("after a late claim of the key on a new instance: %d projection records (%v), want 1", len(recs), err)
	}
	if r := post(t, alone.url, "K", "t1", body(winner)); r.code != http.StatusOK || !bytes.Equal(r.body, won) {
		t.Errorf("the new instance: the winning body answered %d %s, want 200 and %s", r.code, r.body, won)
	}
}

// TestIngressBatchOneCreated (issue 23, defect 2): "201" means "this
// request created it", so a key is answered 201 at most once, ever, and
// exactly once when no request of it was answered 202.
//
// First, deterministically: one batch of two events, whose partitions have
// leaders on different brokers, sent at once to two instances. The broker
// is made to append the first writer's record of the second event after
// the other writer's (interleave), so the two writers are each first in
// one partition. Then 12 keys, each sent as one batch of 8 events by four
// clients at once, two on each instance. Every other request of a key is
// answered 200 with the 201's bytes, and every event is applied once.
func TestIngressBatchOneCreated(t *testing.T) {
	t.Parallel() // mostly waits on held transactions and the broker
	c, err := broker.NewCluster(kfake.NumBrokers(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close) // after the workers' cleanups
	brokers := c.ListenAddrs()
	if err := testkit.CreateTopic(context.Background(), brokers, "events", 4); err != nil {
		t.Fatal(err)
	}
	for p := range int32(4) {
		if err := c.MoveTopicPartition("events", p, p%2); err != nil {
			t.Fatal(err)
		}
	}
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	t.Cleanup(sink.Close)
	ws := claimWorkers(t, strings.Join(brokers, ", "), t.TempDir(), "30s", sink.URL, 2, nil)

	// The aggregates of the first batch: one in partition 0 (leader 0),
	// one in partition 1 (leader 1).
	aggs := [2]string{}
	part := kgo.StickyKeyPartitioner(nil).ForTopic("events")
	for i := 0; aggs[0] == "" || aggs[1] == ""; i++ {
		a := fmt.Sprintf("I-%d", i)
		if p := part.Partition(&kgo.Record{Key: []byte(a)}, 4); p < 2 && aggs[p] == "" {
			aggs[p] = a
		}
	}
	stop := interleave(t, c, "events", 0, 1)
	body := `{"events":[{"eventType":"CaseOpened","aggregateId":"` + aggs[0] + `","aggregateVersion":1},` +
		`{"eventType":"CaseOpened","aggregateId":"` + aggs[1] + `","aggregateVersion":1}]}`
	var first [2]reply
	var wg sync.WaitGroup
	for j := range 2 {
		c := &client{hc: &http.Client{Timeout: 40 * time.Second}}
		wg.Go(func() {
			r, err := c.send(ws[j].url, "interleaved", "t1", body)
			if err != nil {
				t.Error(err)
			}
			first[j] = r
		})
	}
	wg.Wait()
	stop()
	checkOneCreated(t, "interleaved", first[:], 0)

	const keys, perInstance, events = 12, 2, 8
	batch := func(k int) string {
		var evs []string
		for e := range events {
			evs = append(evs, fmt.Sprintf(`{"eventType":"CaseOpened","aggregateId":"B-%d-%d","aggregateVersion":1,"payload":{"e":%d}}`, k, e, e))
		}
		return `{"events":[` + strings.Join(evs, ",") + `]}`
	}
	answers := make([][]reply, keys)
	pending := make([]atomic.Int64, keys) // 202 answers per key
	for k := range answers {
		answers[k] = make([]reply, 2*perInstance)
	}
	start := make(chan struct{})
	for k := range keys {
		for j := range 2 * perInstance {
			c := &client{hc: &http.Client{Timeout: 40 * time.Second}, accepted: func() { pending[k].Add(1) }}
			wg.Go(func() {
				<-start
				r, err := c.send(ws[j%2].url, fmt.Sprintf("batch-%d", k), "t1", batch(k))
				if err != nil {
					t.Error(err)
				}
				answers[k][j] = r
			})
		}
	}
	close(start)
	wg.Wait()
	for k, rs := range answers {
		checkOneCreated(t, fmt.Sprintf("batch-%d", k), rs, pending[k].Load())
	}
	recs, err := testkit.ReadAll(context.Background(), brokers, "overview.v1")
	if err != nil {
		t.Fatal(err)
	}
	perAggregate := map[string]int{}
	for _, r := range recs {
		perAggregate[string(r.Key)]++
	}
	want := 2 + keys*events
	t.Logf("%d projection records over %d aggregates", len(recs), len(perAggregate))
	if len(recs) != want || len(perAggregate) != want {
		t.Errorf("%d projection records over %d aggregates, want %d of each", len(recs), len(perAggregate), want)
	}
}

// checkOneCreated checks the final answers of one key's requests: one 201
// (none only if a request was answered 202 first: that request was the
// one that created it), every other a replayed 200, all the same bytes.
func checkOneCreated(t *testing.T, key string, rs []reply, pending int64) {
	t.Helper()
	created := 0
	for j, r := range rs {
		switch {
		case r.code == http.StatusCreated:
			created++
		case r.code != http.StatusOK || r.hdr.Get(ingress.HeaderReplayed) != "true":
			t.Errorf("key %s, request %d: %d %s, want 201 or a replayed 200", key, j, r.code, r.body)
		}
		if !bytes.Equal(r.body, rs[0].body) {
			t.Errorf("key %s: bodies differ:\n%s\n%s", key, rs[0].body, r.body)
		}
	}
	if created > 1 || (created == 0 && pending == 0) {
		t.Errorf("key %s answered 201 %d times (%d answers 202), want exactly once", key, created, pending)
	}
}

// interleave makes broker c append, in partition second of topic, the
// record of the writer that was first in partition first only after
// another writer's record there: two writers of the same events, sent at
// once, then are each first in one of the two partitions. Only
// non-transactional produce requests (an ingress's) are held, for at most
// 10s; stop ends it.
func interleave(t *testing.T, c *kfake.Cluster, topic string, first, second int32) (stop func()) {
	var (
		mu       sync.Mutex
		leader   int64 = -1 // producer id first in partition first
		other          = make(chan struct{})
		once     sync.Once
		stopped  atomic.Bool
		known    = make(chan struct{})
		knowOnce sync.Once
	)
	id := c.TopicInfo(topic).TopicID // newer produce requests name topics by id
	c.ControlKey(int16(kmsg.Produce), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kr.(*kmsg.ProduceRequest)
		if stopped.Load() || req.TransactionID != nil {
			return nil, nil, false
		}
		for _, tp := range req.Topics {
			if tp.Topic != topic && tp.TopicID != id {
				continue
			}
			for _, p := range tp.Partitions {
				var rb kmsg.RecordBatch
				if err := rb.ReadFrom(p.Records); err != nil {
					continue
				}
				switch p.Partition {
				case first:
					mu.Lock()
					if leader < 0 {
						leader = rb.ProducerID
						knowOnce.Do(func() { close(known) })
					}
					mu.Unlock()
				case second:
					c.SleepControl(func() {
						select {
						case <-known:
						case <-time.After(10 * time.Second):
						}
					})
					mu.Lock()
					isLeader := leader == rb.ProducerID
					mu.Unlock()
					if isLeader {
						c.SleepControl(func() {
							select {
							case <-other:
							case <-time.After(10 * time.Second):
							}
						})
					} else {
						// Appended once this control returns: let the
						// leader's record follow it.
						once.Do(func() { time.AfterFunc(300*time.Millisecond, func() { close(other) }) })
					}
				}
			}
		}
		return nil, nil, false
	})
	return func() { stopped.Store(true) }
}

// TestIngressKeyBeforeClaims: a key ingested before the claims existed has
// receipts and no decision. A request of another shape is refused from
// them (409) and writes nothing; the first payload, half ingested (a batch
// whose second event was never written), is completed by a claim, its
// first event a duplicate.
func TestIngressKeyBeforeClaims(t *testing.T) {
	b, brokers := testkit.Broker(t, 2, "events")
	ctx := context.Background()
	ev := func(i int) string {
		return fmt.Sprintf(`{"eventType":"CaseOpened","aggregateId":"L-%d","aggregateVersion":1,"payload":{"i":%d}}`, i, i)
	}
	// Event 0 of a batch of two, as the ingress wrote it before claims.
	origin, _ := json.Marshal(receipt.Origin{TenantID: "t1", Key: "legacy", Index: 0, Count: 2, Batch: true})
	v0 := `{"eventId":"` + receipt.EventID("t1", "legacy", 0) + `","tenantId":"t1",` + ev(0)[1:]
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "events", Key: []byte("L-0"), Value: []byte(v0),
		Headers: []kgo.RecordHeader{{Key: receipt.Header, Value: origin}}}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	w := startWorker(t, b.Addr(), "w1", true, nil)
	testkit.Await(t, 30*time.Second, "the legacy receipt", func() bool {
		req, _ := http.NewRequest("GET", w.url+"/v1/receipts/legacy?tenant=t1", nil)
		return do(t, req).code == http.StatusAccepted // one of its two events has a receipt
	})
	problemField(t, post(t, w.url, "legacy", "t1", `{"events":[`+ev(0)+`,`+ev(1)+`,`+ev(2)+`]}`), http.StatusConflict, ingress.HeaderKey)
	if n := claimed(t, brokers); n != 0 {
		t.Fatalf("a refused request wrote %d claims", n)
	}
	r := post(t, w.url, "legacy", "t1", `{"events":[`+ev(0)+`,`+ev(1)+`]}`)
	if got := decodeOK(t, r); r.code != http.StatusCreated || len(got.Events) != 2 || got.Events[0].Offset != 0 {
		t.Fatalf("the first payload, completed: %d %s", r.code, r.body)
	}
	waitProcessed(t, brokers, "events")
	recs, err := testkit.ReadAll(ctx, brokers, "overview.v1")
	if err != nil || len(recs) != 2 {
		t.Fatalf("%d projection records (%v), want one per event", len(recs), err)
	}
}
