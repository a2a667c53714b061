package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/projector-dev/projector/internal/app/broker"
	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/ingress"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/operator/ops"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// aclEnv is a kfake broker that requires SASL/SCRAM-SHA-256 and enforces
// ACLs, with a superuser ("admin") that seeds it, creates a principal per
// role run and grants it ACLs, and a webhook receiver for the executor.
type aclEnv struct {
	addr   string
	admin  *kadm.Client
	root   string // state directories below it
	hook   *httptest.Server
	mu     sync.Mutex
	called map[string]int // webhook requests per Idempotency-Key
	users  int
}

const aclPassword = "pw-for-acl-tests"

// The seeded input: applied events, a side effect that succeeds (A-1 v2),
// two whose calls hang and end unknown, parked (U-1, U-2), two aggregates
// with a gap (G-1 for gaps list and inspect, G-2 for gaps skip), and a
// record that is not JSON (a dead letter).
var aclSeed = []struct{ key, value string }{
	{"A-1", aclEvent("a1", "CaseOpened", "A-1", 1)},
	{"A-1", aclEvent("a2", "CaseEscalated", "A-1", 2)},
	{"U-1", aclEvent("u1", "CaseOpened", "U-1", 1)},
	{"U-1", aclEvent("u2", "CaseEscalated", "U-1", 2)},
	{"U-2", aclEvent("u3", "CaseOpened", "U-2", 1)},
	{"U-2", aclEvent("u4", "CaseEscalated", "U-2", 2)},
	{"G-1", aclEvent("g1", "CaseOpened", "G-1", 1)},
	{"G-1", aclEvent("g3", "CaseOpened", "G-1", 3)},
	{"G-2", aclEvent("h1", "CaseOpened", "G-2", 1)},
	{"G-2", aclEvent("h3", "CaseOpened", "G-2", 3)},
	{"X-1", "not json"},
}

func aclEvent(id, typ, agg string, v int) string {
	return fmt.Sprintf(`{"eventId":%q,"eventType":%q,"aggregateId":%q,"aggregateVersion":%d,"payload":{"v":%d}}`, id, typ, agg, v, v)
}

func startACLEnv(t *testing.T, opts ...kfake.Opt) *aclEnv {
	t.Helper()
	c, err := broker.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("SCRAM-SHA-256", "admin", aclPassword), kfake.SeedTopics(2, "events")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	e := &aclEnv{addr: c.ListenAddrs()[0], root: t.TempDir(), called: map[string]int{}}
	cl, err := kgo.NewClient(e.clientOpts("admin")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	e.admin = kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recs []*kgo.Record
	for _, s := range aclSeed {
		recs = append(recs, &kgo.Record{Topic: "events", Key: []byte(s.key), Value: []byte(s.value)})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("seed: %v", err)
	}
	stop := make(chan struct{})
	e.hook = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		e.mu.Lock()
		e.called[key]++
		e.mu.Unlock()
		if strings.HasPrefix(key, "notify:U-") { // no answer: the outcome is unknown
			select {
			case <-r.Context().Done():
			case <-stop:
			}
			return
		}
		fmt.Fprintf(w, `{"id":"ref-%s"}`, key)
	}))
	t.Cleanup(func() { close(stop); e.hook.Close() })
	return e
}

func (e *aclEnv) clientOpts(user string) []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(e.addr), kgo.SASL(scram.Auth{User: user, Pass: aclPassword}.AsSha256Mechanism())}
}

func (e *aclEnv) calls(key string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.called[key]
}

// principal creates a new SCRAM user and grants it exactly gs.
func (e *aclEnv) principal(t *testing.T, prefix string, gs []grant) string {
	t.Helper()
	e.mu.Lock()
	e.users++
	user := fmt.Sprintf("%s-%d", strings.ReplaceAll(prefix, " ", "-"), e.users)
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := e.admin.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: user, Mechanism: kadm.ScramSha256, Iterations: 4096, Password: aclPassword}})
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatalf("create user %s: %v", user, err)
	}
	for _, g := range gs {
		b := kadm.NewACLs().Allow("User:" + user).AllowHosts("*").Operations(g.op)
		switch g.res {
		case kmsg.ACLResourceTypeTopic:
			b.Topics(g.name)
		case kmsg.ACLResourceTypeGroup:
			b.Groups(g.name)
		case kmsg.ACLResourceTypeTransactionalId:
			b.TransactionalIDs(g.name)
		}
		if g.prefix {
			b.ResourcePatternType(kadm.ACLPatternPrefixed)
		}
		rs, err := e.admin.CreateACLs(ctx, b)
		if err == nil {
			for _, r := range rs {
				err = r.Err
			}
		}
		if err != nil {
			t.Fatalf("grant %s to %s: %v", g, user, err)
		}
	}
	return user
}

const aclConfig = `name: %[1]s
kafka:
  brokers: [%[2]s]
  instanceId: %[3]s
  input: [%[4]s]
  effectsTopic: %[5]s
  deadLetterTopic: %[6]s
  sessionTimeout: 10s
  transactionTimeout: 10s
  sasl: {mechanism: SCRAM-SHA-256, username: %[7]s, password: %[8]s}
state: {dir: %[9]q}
http: {listen: "off"}
gaps: {holdTimeout: 1h, onTimeout: wait}
projections:
  - name: overview
    topic: %[10]s
    events: {CaseOpened: merge, CaseEscalated: merge, CaseClosed: delete}
sideEffects:
  - name: notify
    on: [CaseEscalated]
    key: "notify:{aggregateId}:v{aggregateVersion}"
    webhook: {url: %[11]q, timeout: 300ms}
    onUnknown: park
ingress: {listen: "off", topic: %[4]s, receiptsTopic: %[12]s, claimsTopic: %[13]s}
`

// config writes the configuration of a role run by user with names n.
func (e *aclEnv) config(t *testing.T, n aclNames, user string) string {
	t.Helper()
	dir := filepath.Join(e.root, user)
	body := fmt.Sprintf(aclConfig, n.name, e.addr, n.instance, n.input, n.effects, n.dlq, user, aclPassword,
		filepath.Join(dir, "state"), n.projection, e.hook.URL+"/notify", n.receipts, n.claims)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "projector.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// liveNames are the names of the live processor and executor the operator
// commands and the ingress work against.
func liveNames() aclNames { return namesFor("acl") }

func namesFor(name string) aclNames {
	return aclNames{name: name, instance: "t1", input: "events", projection: name + ".overview",
		effects: name + ".effects", dlq: name + ".dlq", receipts: name + ".receipts", claims: name + ".claims",
		target: name + ".overview.v2", diffA: name + ".overview", diffB: name + ".overview.v2"}
}

func aclLogger() *slog.Logger {
	if os.Getenv("PROJECTOR_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// runningApp is `projector run --role R` in-process.
type runningApp struct {
	a    *wiring.App
	stop context.CancelFunc
	done chan error
}

func (e *aclEnv) startApp(t *testing.T, cfgPath string, role wiring.Role) *runningApp {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	a, err := wiring.New(cfg, wiring.Options{Role: role, Logger: aclLogger().With("role", string(role), "user", cfg.Kafka.SASL.Username)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningApp{a: a, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(r.close)
	return r
}

func (r *runningApp) close() {
	if r.stop == nil {
		return
	}
	r.stop()
	<-r.done
	r.a.Close()
	r.stop = nil
}

// ready reports whether the app's loops have joined their groups and
// restored their partitions: it started with every permission it checks.
func (r *runningApp) ready() bool { ok, _ := r.a.Ready(); return ok }

// failure waits for the run to fail and returns its error, or fails the
// test if it became ready (or did its work) instead, or ran on.
func (r *runningApp) failure(t *testing.T, worked func() bool) error {
	t.Helper()
	deadline := time.After(90 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-r.done:
			r.done <- err // for close
			return err
		case <-deadline:
			t.Fatal("still running after 90s: a missing permission must stop it at start or first use")
		case <-tick.C:
			if r.ready() || worked() {
				t.Fatal("started and became ready although a permission it needs is missing")
			}
		}
	}
}

// ingressRun is the ingress alone, as `projector run` starts it, under its
// own principal (ingress.listen on a free port).
func (e *aclEnv) startIngress(t *testing.T, cfgPath string) (*ingress.Server, chan error) {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	copts, err := wiring.ClientOpts(&cfg.Kafka)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ingress.New(ingress.Config{Listen: "127.0.0.1:0", Topic: cfg.Ingress.Topic, ReceiptsTopic: cfg.Ingress.ReceiptsTopic,
		ClaimsTopic: cfg.Ingress.ClaimsTopic, Timeout: 20 * time.Second, Brokers: cfg.Kafka.Brokers, ClientOpts: copts, Logger: aclLogger().With("role", "ingress")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, done
}

// ledger reads the live executor's ledger as the superuser.
func (e *aclEnv) ledger(t *testing.T) map[string]effect.Entry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := liveNames()
	entries, err := ops.ReadLedger(ctx, e.clientOpts("admin"), n.name, n.effects)
	if err != nil {
		t.Fatalf("ledger: %v", err)
	}
	out := map[string]effect.Entry{}
	for _, en := range entries {
		out[en.Key] = en
	}
	return out
}
