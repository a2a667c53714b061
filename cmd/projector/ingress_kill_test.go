package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/harness/testkit"
)

const ingressKillConfig = `name: ik
kafka:
  brokers: [%s]
  instanceId: %s
  input: [events]
  transactionTimeout: 10s
  sessionTimeout: 6s
state: {dir: %q}
http: {listen: "off"}
ingress:
  listen: %s
  timeout: 3s
projections:
  - name: overview
    topic: overview.v1
    events: {CaseOpened: merge}
`

// ingressInstance is one `projector run` subprocess with an ingress.
type ingressInstance struct {
	name, cfg, addr string
	mu              sync.Mutex
	cmd             *exec.Cmd
}

func (in *ingressInstance) start(t *testing.T) {
	t.Helper()
	cmd := exec.Command(binary, "run", "--config", in.cfg, "--log-level", "warn")
	if os.Getenv("PROJECTOR_TEST_LOG") != "" {
		cmd.Stderr = os.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	in.mu.Lock()
	in.cmd = cmd
	in.mu.Unlock()
}

func (in *ingressInstance) kill() {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.cmd != nil {
		_ = in.cmd.Process.Signal(syscall.SIGKILL)
		_ = in.cmd.Wait()
		in.cmd = nil
	}
}

// waitReady waits until the ingress answers (a receipt lookup is 404, not
// 503 or a refused connection).
func (in *ingressInstance) waitReady(t *testing.T) {
	t.Helper()
	var err error
	if werr := testkit.WaitFor(context.Background(), time.Minute, func() bool {
		var resp *http.Response
		if resp, err = http.Get("http://" + in.addr + "/v1/receipts/probe"); err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusNotFound
	}); werr != nil {
		t.Fatalf("%s: ingress not ready within a minute (last: %v)", in.name, err)
	}
}

// attempt is one answered request of the concurrency test.
type attempt struct {
	changed bool
	code    int
	body    []byte
	at      time.Time
}

// TestIngressConcurrentKill: 32 clients send 1,000 keys (250 with -short;
// PROJECTOR_TEST_INGRESS_KEYS sets it), each key 1–5 times, some retries
// with a changed payload, spread over two worker processes, one of which is
// SIGKILLed mid-run and restarted. Exactly one event per key reaches the
// projection, every changed payload gets 409, every 2xx body of a key is
// identical, and no 5xx is answered outside the kill window.
func TestIngressConcurrentKill(t *testing.T) {
	keys := 1000
	if testing.Short() {
		keys = 250 // 1,000 keys take ~4 s, under -race too: the workers are not race builds
	}
	if v := os.Getenv("PROJECTOR_TEST_INGRESS_KEYS"); v != "" {
		keys, _ = strconv.Atoi(v)
	}
	const clients = 32
	b, brokers := testkit.Broker(t, 4, "events")
	ctx := context.Background()
	dir := t.TempDir()
	var inst [2]*ingressInstance
	for i := range inst {
		name := fmt.Sprintf("i%d", i)
		addr := freeAddr(t)
		cfg := writeConfig(t, fmt.Sprintf(ingressKillConfig, b.Addr(), name, filepath.Join(dir, name), addr))
		inst[i] = &ingressInstance{name: name, cfg: cfg, addr: addr}
		inst[i].start(t)
		t.Cleanup(inst[i].kill)
	}
	for _, in := range inst {
		in.waitReady(t)
	}

	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d keys, %d clients", seed, keys, clients)
	hc := &http.Client{Timeout: 20 * time.Second}
	var (
		killedAt, backAt atomic.Int64 // unix nanos: the kill window
		done, doneAtKill atomic.Int64
		mu               sync.Mutex
		fiveXX           []string // 5xx answers, checked against the window afterwards
		log              = make([][]attempt, keys)
	)
	body := func(k int, changed bool) string {
		if changed {
			return fmt.Sprintf(`{"eventType":"CaseOpened","aggregateId":"A-%d","aggregateVersion":1,"payload":{"n":%d,"changed":true}}`, k, k)
		}
		return fmt.Sprintf(`{"eventType":"CaseOpened","aggregateId":"A-%d","aggregateVersion":1,"payload":{"n":%d}}`, k, k)
	}
	// send sends one attempt until it gets a final answer (not a refused
	// connection, a 5xx or a 202): the client retries with the same key and
	// body, on the other instance, as docs/ingress.md tells clients to.
	send := func(rng *rand.Rand, k int, changed bool) attempt {
		inIdx := rng.IntN(2)
		for tries := 0; ; tries++ {
			if tries > 200 {
				t.Errorf("key %d: no final answer after 200 tries", k)
				return attempt{}
			}
			in := inst[inIdx]
			req, _ := http.NewRequest("POST", "http://"+in.addr+"/v1/events", strings.NewReader(body(k, changed)))
			req.Header.Set("Idempotency-Key", fmt.Sprintf("key-%d", k))
			resp, err := hc.Do(req)
			if err != nil {
				inIdx = 1 - inIdx
				time.Sleep(50 * time.Millisecond) // sleep ok: the client's retry pause, as a real client's
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode >= 500:
				mu.Lock()
				fiveXX = append(fiveXX, fmt.Sprintf("%d@%d from %s: %s", resp.StatusCode, time.Now().UnixNano(), in.name, b))
				mu.Unlock()
				inIdx = 1 - inIdx
				time.Sleep(100 * time.Millisecond) // sleep ok: the client's retry pause after a 5xx
				continue
			case resp.StatusCode == http.StatusAccepted,
				resp.StatusCode == http.StatusConflict && resp.Header.Get("Retry-After") != "":
				// Committed soon (202) or another attempt is in flight
				// (cannot happen here: a key's attempts are sequential,
				// but an earlier attempt's request may still be handled
				// after the client gave up on it).
				time.Sleep(200 * time.Millisecond) // sleep ok: the client's pause before it asks again (202, 409 Retry-After)
				continue
			}
			return attempt{changed: changed, code: resp.StatusCode, body: b, at: time.Now()}
		}
	}
	work := make(chan int)
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		rng := rand.New(rand.NewPCG(seed, uint64(c)))
		wg.Go(func() {
			for k := range work {
				n := 1 + rng.IntN(5)
				for a := 0; a < n; a++ {
					changed := a > 0 && rng.IntN(4) == 0
					at := send(rng, k, changed)
					log[k] = append(log[k], at)
				}
				done.Add(1)
			}
		})
	}
	// The killer: SIGKILL instance 0 once a third of the keys are done,
	// restart it a second later.
	killDone := make(chan struct{})
	go func() {
		defer close(killDone)
		_ = testkit.WaitFor(context.Background(), 5*time.Minute, func() bool { return done.Load() >= int64(keys/3) })
		killedAt.Store(time.Now().UnixNano())
		doneAtKill.Store(done.Load())
		inst[0].kill()
		time.Sleep(time.Second) // sleep ok: the instance stays down a second (the fault); the test then waits for it to answer
		inst[0].start(t)
		inst[0].waitReady(t)
		backAt.Store(time.Now().UnixNano())
	}()
	start := time.Now()
	for k := 0; k < keys; k++ {
		work <- k
	}
	close(work)
	wg.Wait()
	<-killDone
	elapsed := time.Since(start)
	if killedAt.Load() == 0 || backAt.Load() == 0 || doneAtKill.Load() >= int64(keys) {
		t.Fatalf("the kill did not land mid-run (%d of %d keys done at the kill)", doneAtKill.Load(), keys)
	}

	// No 5xx outside the kill window (the restart's rebalance ends within a
	// session timeout of the instance's return).
	windowEnd := backAt.Load() + int64(10*time.Second)
	out5 := 0
	for _, f := range fiveXX {
		at, _ := strconv.ParseInt(strings.SplitN(strings.SplitN(f, "@", 2)[1], " ", 2)[0], 10, 64)
		if at < killedAt.Load() || at > windowEnd {
			out5++
			t.Errorf("5xx outside the kill window: %s", f)
		}
	}
	// Per key: every 2xx body identical, every changed payload 409.
	counts := map[int]int{}
	for k, atts := range log {
		var first []byte
		for _, a := range atts {
			counts[a.code]++
			switch {
			case a.changed && a.code != http.StatusConflict:
				t.Errorf("key %d: changed payload answered %d %s, want 409", k, a.code, a.body)
			case !a.changed && a.code != http.StatusCreated && a.code != http.StatusOK:
				t.Errorf("key %d: payload answered %d %s, want 200/201", k, a.code, a.body)
			case !a.changed && first == nil:
				first = a.body
			case !a.changed && !bytes.Equal(first, a.body):
				t.Errorf("key %d: 2xx bodies differ:\n%s\n%s", k, first, a.body)
			}
		}
		if first == nil {
			t.Errorf("key %d: never answered 2xx", k)
			continue
		}
		var rb struct{ Outcome string }
		if err := json.Unmarshal(first, &rb); err != nil || rb.Outcome != "applied" {
			t.Errorf("key %d: outcome %q (%v), want applied", k, rb.Outcome, err)
		}
	}
	// Exactly one event per key in the projection, with the first payload.
	recs, err := testkit.ReadAll(ctx, brokers, "overview.v1")
	if err != nil {
		t.Fatal(err)
	}
	perKey := map[string]int{}
	for _, r := range recs {
		perKey[string(r.Key)]++
		var v testkit.ProjectionValue
		if err := json.Unmarshal(r.Value, &v); err != nil || bytes.Contains(v.State, []byte("changed")) {
			t.Errorf("projection record %s: a changed payload was applied (%v)", r.Value, err)
		}
	}
	dup := 0
	for _, n := range perKey {
		if n > 1 {
			dup++
		}
	}
	if len(perKey) != keys || dup > 0 || len(recs) != keys {
		t.Errorf("projection: %d records, %d keys, %d keys with more than one event; want %d of each, 0 dup", len(recs), len(perKey), dup, keys)
	}
	in, _ := testkit.ReadAll(ctx, brokers, "events")
	t.Logf("%d keys, %d requests answered (%v), %d 5xx in the kill window, %d outside; %d input records; projection %d records, dup %d; %s",
		keys, counts[200]+counts[201]+counts[409], counts, len(fiveXX)-out5, out5, len(in), len(recs), dup, elapsed.Round(time.Millisecond))
}
