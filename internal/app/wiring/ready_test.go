package wiring_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/harness/testkit"
)

// readyConfig: one processor with a side effect (role all runs the executor
// too) against a broker given by address.
const readyConfig = `name: rdy
kafka:
  brokers: [%s]
  instanceId: %s
  input: [case-events]
  effectsTopic: rdy.effects
  sessionTimeout: 6s
  transactionTimeout: 10s
state: {dir: %q}
http: {listen: %q}
projections:
  - name: overview
    topic: overview.v1
    events: {CaseOpened: merge, CaseEscalated: merge}
sideEffects:
  - name: notify
    on: [CaseEscalated]
    key: "n:{aggregateId}:{aggregateVersion}"
    webhook: {url: "http://127.0.0.1:9/never-called"}
`

// anyPort is a listen address on a port the listener picks: a port found
// free beforehand may be taken by another test's listener before ours binds
// it ("address already in use").
const anyPort = "127.0.0.1:0"

// listeningAddr waits until srv (the App's HTTP server, or its ingress) has
// bound its listener and returns the address it bound.
func listeningAddr(t *testing.T, srv interface {
	Listening() <-chan struct{}
	Addr() net.Addr
}) string {
	t.Helper()
	<-srv.Listening()
	addr := srv.Addr()
	if addr == nil {
		t.Fatal("the server did not listen (Run returned its error)")
	}
	return addr.String()
}

// readyz returns the status code and body of GET /readyz (0 when the
// server does not answer).
func readyz(addr string) (int, string) {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// TestReadyIdleThirdInstance: three instances of one processor (role all:
// processor and executor) on a 2-partition input and a 2-partition effects
// topic. The third gets no partition in either group; it is ready – App.Ready
// and GET /readyz 200 – within a few seconds of starting, and the other two
// are ready too, each with one partition of each topic.
func TestReadyIdleThirdInstance(t *testing.T) {
	b, _ := testkit.Broker(t, 2, "case-events", "rdy.effects")
	type inst struct {
		id, http string
		a        *wiring.App
		stop     func()
	}
	start := func(id string) *inst {
		in := &inst{id: id}
		cfg, err := config.Parse([]byte(fmt.Sprintf(readyConfig, b.Addr(), id, filepath.Join(t.TempDir(), id), anyPort)), nil)
		if err != nil {
			t.Fatal(err)
		}
		in.a, in.stop = runApp(t, cfg)
		in.http = listeningAddr(t, in.a.HTTP)
		if in.a.Processor == nil || in.a.Executor == nil {
			t.Fatalf("%s: role all should run the processor and the executor", id)
		}
		return in
	}
	waitReady := func(in *inst, within time.Duration) time.Duration {
		t.Helper()
		begin := time.Now()
		var (
			ok        bool
			why, body string
			code      int
		)
		if err := testkit.WaitFor(context.Background(), within, func() bool {
			ok, why = in.a.Ready()
			code, body = readyz(in.http)
			return ok && code == http.StatusOK
		}); err != nil {
			t.Fatalf("%s not ready after %s: Ready() = %v %q; /readyz %d %q", in.id, within, ok, why, code, body)
		}
		return time.Since(begin)
	}

	a, b2 := start("i1"), start("i2")
	defer a.stop()
	defer b2.stop()
	waitReady(a, 20*time.Second)
	waitReady(b2, 20*time.Second)

	// 15 s, not less: joining two groups as an idle member takes two
	// rebalances, which a loaded machine under -race has stretched past
	// 5 s (the time taken is logged below).
	c := start("i3")
	defer c.stop()
	took := waitReady(c, 15*time.Second)
	if n := len(c.a.Processor.Stats().Assigned()); n != 0 {
		t.Errorf("third instance holds %d input partitions, want none", n)
	}
	if n := len(c.a.Executor.Stats().Assigned()); n != 0 {
		t.Errorf("third instance holds %d effects partitions, want none", n)
	}
	if code, body := readyz(c.http); code != http.StatusOK || body != "ready" {
		t.Errorf("third instance: /readyz %d %q, want 200 ready", code, body)
	}
	if v := gauge(t, c.a, "projector_ready", ""); v != 1 {
		t.Errorf("third instance: projector_ready = %v", v)
	}
	// The first two are (again, after the rebalance the third caused)
	// ready, and share the partitions.
	// An instance is ready also while it holds nothing, so "ready" alone
	// can be seen mid-rebalance: wait for the settled assignment.
	for _, in := range []*inst{a, b2} {
		var p, e int
		var ok bool
		if err := testkit.WaitFor(context.Background(), 15*time.Second, func() bool {
			p, e = len(in.a.Processor.Stats().Assigned()), len(in.a.Executor.Stats().Assigned())
			ok, _ = in.a.Ready()
			return ok && p == 1 && e == 1
		}); err != nil {
			t.Errorf("%s holds %d input and %d effects partitions (ready %v), want 1 and 1, ready", in.id, p, e, ok)
		}
	}
	t.Logf("idle third instance ready %s after it started", took.Round(time.Millisecond))
}
