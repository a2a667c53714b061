package sideeffects

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/harness/testkit"
)

var t0 = time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)

// behaviour decides one request's fate. n is the request's number for its
// Idempotency-Key (1-based). It returns true when it handled the request
// itself (hang, drop, error status); false means "apply and answer 200".
type behaviour func(rc *receiver, w http.ResponseWriter, r *http.Request, key string, n int) bool

// receiver is a real HTTP endpoint on 127.0.0.1 that honours Idempotency-Key:
// it applies an effect at most once per key and answers a repeat with the
// first answer. It counts requests and applications per key.
type receiver struct {
	t        *testing.T
	srv      *httptest.Server
	behave   behaviour
	stop     chan struct{}
	mu       sync.Mutex
	requests map[string]int
	applied  map[string]int
	bodies   map[string][]byte
	inflight atomic.Int32
	peak     atomic.Int32
	delay    time.Duration
}

func newReceiver(t *testing.T, b behaviour) *receiver {
	rc := &receiver{t: t, behave: b, stop: make(chan struct{}),
		requests: map[string]int{}, applied: map[string]int{}, bodies: map[string][]byte{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(func() {
		close(rc.stop) // releases hanging handlers so Close does not wait
		rc.srv.Close()
	})
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	n := rc.inflight.Add(1)
	defer rc.inflight.Add(-1)
	for {
		p := rc.peak.Load()
		if n <= p || rc.peak.CompareAndSwap(p, n) {
			break
		}
	}
	body, _ := io.ReadAll(r.Body)
	key := r.Header.Get("Idempotency-Key")
	if r.Method != http.MethodPost || key == "" || r.Header.Get("Content-Type") != "application/json" {
		rc.t.Errorf("bad request: %s key %q content type %q", r.Method, key, r.Header.Get("Content-Type"))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	rc.requests[key]++
	count := rc.requests[key]
	rc.bodies[key] = body
	rc.mu.Unlock()
	if rc.delay > 0 {
		time.Sleep(rc.delay) // sleep ok: the receiver's answer time, part of the scenario
	}
	if rc.behave != nil && rc.behave(rc, w, r, key, count) {
		return
	}
	rc.apply(key)
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"ref-%s"}`, key)
}

// apply performs the effect once per key.
func (rc *receiver) apply(key string) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.applied[key] == 0 {
		rc.applied[key] = 1
	}
}

func (rc *receiver) counts(key string) (requests, applied int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.requests[key], rc.applied[key]
}

func (rc *receiver) totalRequests() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	n := 0
	for _, c := range rc.requests {
		n += c
	}
	return n
}

// failTimes answers code to the first n requests of each key.
func failTimes(n, code int) behaviour {
	return func(_ *receiver, w http.ResponseWriter, _ *http.Request, _ string, i int) bool {
		if i <= n {
			w.WriteHeader(code)
			return true
		}
		return false
	}
}

// hangFirst applies the effect on the first n requests of a key and then
// never answers them (until the client gives up).
func hangFirst(n int) behaviour {
	return func(rc *receiver, w http.ResponseWriter, r *http.Request, key string, i int) bool {
		if i > n {
			return false
		}
		rc.apply(key)
		select {
		case <-r.Context().Done():
		case <-rc.stop:
		}
		return true
	}
}

// dropFirst applies the effect on the first n requests of a key, then closes
// the connection without an answer.
func dropFirst(n int) behaviour {
	return func(rc *receiver, w http.ResponseWriter, _ *http.Request, key string, i int) bool {
		if i > n {
			return false
		}
		rc.apply(key)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			rc.t.Errorf("hijack: %v", err)
			return true
		}
		conn.Close()
		return true
	}
}

// waitIdle waits until r has nothing scheduled and nothing running: every
// key enqueued before the call has been looked at, and whatever attempt that
// started has been recorded and released. A retry the Runner schedules is in
// its schedule before the attempt's key is released, so a wrongly scheduled
// extra attempt keeps r busy until it has been made: a test that checks that
// something did not happen waits for this, not for time.
func waitIdle(t *testing.T, r *Runner) {
	t.Helper()
	testkit.Await(t, 20*time.Second, "the runner to be idle", func() bool { return r.Backlog() == 0 })
}

// runRunner starts r.Run and returns a stop function that cancels it and
// checks that it returned nil.
func runRunner(t *testing.T, r *Runner) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// withStore is c running on st, a store the test opened itself.
func withStore(st *state.Store, c WorkerConfig) WorkerConfig {
	c.seams.Store = st
	return c
}
