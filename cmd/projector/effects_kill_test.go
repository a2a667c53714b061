package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/internal/operator/ops"
	"github.com/projector-dev/projector/sideeffects/effect"
)

const killConfig = `name: kx
kafka:
  brokers: [%s]
  instanceId: k1
  input: [events]
  transactionTimeout: 10s
  sessionTimeout: 6s
state: {dir: %q}
http: {listen: "off"}
projections:
  - name: overview
    topic: overview.v1
    events: {CaseOpened: merge, CaseUpdated: merge, CaseEscalated: merge}
sideEffects:
  - name: notify
    on: [CaseEscalated]
    key: "notify:{aggregateId}:v{aggregateVersion}"
    webhook: {url: %q, timeout: 2s}
    maxAttempts: 50
    onUnknown: %s
`

// slowReceiver counts the calls per Idempotency-Key (a receiver honouring
// the key applies it at the first, so a key called at least once is applied
// exactly once) and takes a while to answer, so that kills land between
// calls and their records.
type slowReceiver struct {
	mu       sync.Mutex
	requests map[string]int
}

func (s *slowReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.requests[key]++
	s.mu.Unlock()
	time.Sleep(time.Duration(150+rand.IntN(150)) * time.Millisecond) // sleep ok: the receiver's answer time, so that kills find calls in flight
	fmt.Fprintf(w, `{"id":"r-%s"}`, key)
}

// total is the number of requests received, all keys together.
func (s *slowReceiver) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.requests {
		n += c
	}
	return n
}

// TestExecutorKill9 is issue 4's acceptance 2: the real binary is killed with
// SIGKILL at random moments while it calls the webhook, and restarted. With
// onUnknown retry the receiver applies every key exactly once; with park no
// key is ever called twice and every key left in doubt is listed by
// `projector effects list --status unknown`.
func TestExecutorKill9(t *testing.T) {
	t.Parallel() // mostly waits: a webhook answering in 150-300 ms, process restarts
	kills := 5
	if testing.Short() {
		kills = 3
	}
	if v := os.Getenv("PROJECTOR_TEST_KILLS"); v != "" {
		kills, _ = strconv.Atoi(v)
	}
	for _, policy := range []string{"retry", "park"} {
		t.Run(policy, func(t *testing.T) {
			b, brokers := testkit.Broker(t, 2, "events")
			ctx := context.Background()
			rcv := &slowReceiver{requests: map[string]int{}}
			srv := httptest.NewServer(rcv)
			defer srv.Close()
			var recs []workload.Record
			keys := map[string]bool{}
			for a := 0; a < 60; a++ {
				agg := fmt.Sprintf("K-%03d", a)
				for v := 1; v <= 3; v++ {
					typ := map[int]string{1: "CaseOpened", 2: "CaseEscalated", 3: "CaseEscalated"}[v]
					recs = append(recs, workload.Record{Key: []byte(agg), Value: []byte(fmt.Sprintf(
						`{"eventId":"%s-%d","eventType":%q,"aggregateId":%q,"aggregateVersion":%d,"payload":{"v":%d}}`, agg, v, typ, agg, v, v))})
					if v > 1 {
						keys[fmt.Sprintf("notify:%s:v%d", agg, v)] = true
					}
				}
			}
			if err := testkit.Produce(ctx, brokers, "events", recs); err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			cfg := writeConfig(t, fmt.Sprintf(killConfig, b.Addr(), filepath.Join(dir, "state"), srv.URL, policy))
			rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
			landed := 0
			for k := 0; k < kills; k++ {
				cmd := exec.Command(binary, "run", "--config", cfg, "--log-level", "warn")
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				// Kill while calls are in flight: wait for this life's first
				// requests (each takes 150-300 ms), then strike at once.
				before := rcv.total()
				_ = testkit.WaitFor(context.Background(), 30*time.Second, func() bool { return rcv.total() > before })
				if rcv.total() > before {
					landed++
				}
				time.Sleep(time.Duration(20+rng.IntN(80)) * time.Millisecond) // sleep ok: a random kill point, the fault itself
				_ = cmd.Process.Signal(syscall.SIGKILL)
				_ = cmd.Wait()
			}
			if landed == 0 {
				t.Fatal("no life made a call before its kill")
			}
			// A last run to completion, stopped cleanly.
			cmd := exec.Command(binary, "run", "--config", cfg, "--log-level", "info")
			lastLog := &syncWriter{b: &bytes.Buffer{}}
			cmd.Stderr = lastLog
			if os.Getenv("PROJECTOR_TEST_LOG") != "" {
				cmd = exec.Command(binary, "run", "--config", cfg, "--log-level", "debug")
				cmd.Stderr = os.Stderr
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill() }) // never leave a worker behind a failed test
			opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
			settled := func() (int, []effect.Entry) {
				entries, err := ops.ReadLedger(ctx, opts, "kx", "kx.effects")
				if err != nil {
					t.Fatal(err)
				}
				done := 0
				for _, e := range entries {
					if e.Status == effect.Succeeded || (policy == "park" && e.Status == effect.Unknown) {
						done++
					}
				}
				return done, entries
			}
			var entries []effect.Entry
			var done int
			if err := testkit.WaitFor(context.Background(), 2*time.Minute, func() bool {
				done, entries = settled()
				return done == len(keys)
			}); err != nil {
				byStatus := map[string]int{}
				for _, e := range entries {
					byStatus[e.Status.String()]++
				}
				t.Fatalf("%d of %d keys settled after the last run; ledger: %v (%d entries); last run's log:\n%s", done, len(keys), byStatus, len(entries), lastLog.String())
			}
			_ = cmd.Process.Signal(syscall.SIGTERM)
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case err := <-exited:
				if err != nil {
					t.Fatalf("last run: %v", err)
				}
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Signal(syscall.SIGQUIT) // goroutine dump on stderr (with PROJECTOR_TEST_LOG)
				<-exited
				t.Fatal("last run did not stop within 30s of SIGTERM")
			}

			rcv.mu.Lock()
			defer rcv.mu.Unlock()
			maxReq, calls, unknown := 0, 0, 0
			for k := range keys {
				maxReq = max(maxReq, rcv.requests[k])
				calls += rcv.requests[k]
			}
			var parked []string
			for _, e := range entries {
				if e.Status == effect.Unknown {
					unknown++
					parked = append(parked, e.Key)
				}
			}
			// The calls are slow and always in flight, so the kills must
			// have landed between calls and their records.
			if policy == "retry" && calls <= len(keys) {
				t.Errorf("no key was called again: no kill landed inside a call (calls %d, keys %d)", calls, len(keys))
			}
			if policy == "park" && unknown == 0 {
				t.Errorf("no key was left unknown: no kill landed inside a call")
			}
			switch policy {
			case "retry":
				for k := range keys {
					if rcv.requests[k] == 0 {
						t.Errorf("key %s never called (so never applied)", k)
					}
				}
			case "park":
				if maxReq > 1 {
					t.Errorf("a key was called %d times under onUnknown: park", maxReq)
				}
				r := runBinary(t, time.Minute, "effects", "list", "--config", cfg, "--status", "unknown")
				if r.code != 0 {
					t.Fatalf("effects list: exit %d: %s", r.code, r.stderr)
				}
				for _, k := range parked {
					if !strings.Contains(r.stdout, k) {
						t.Errorf("parked key %s missing from effects list --status unknown", k)
					}
				}
				if !strings.Contains(r.stdout, fmt.Sprintf("%d entries", len(parked))) {
					t.Errorf("effects list --status unknown: want %d entries:\n%s", len(parked), r.stdout)
				}
			}
			t.Logf("onUnknown %s: %d kills; %d keys, %d intents, %d calls, %d left unknown (parked), max requests per key %d",
				policy, kills, len(keys), len(keys), calls, unknown, maxReq)
		})
	}
}
