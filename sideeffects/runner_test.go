package sideeffects

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/sideeffects/effect"
	"github.com/projector-dev/projector/sideeffects/sideeffectstest"
	"github.com/projector-dev/projector/sideeffects/webhook"
)

// hangTimeout is the webhook timeout where a test wants it to expire (the
// receiver hangs); retryTimeout where it wants an unknown outcome retried
// soon (the retry waits for the attempt's deadline) and the retry to succeed
// within it; every other test uses a long one, so that a loaded machine
// cannot turn a success into an unknown outcome.
const (
	hangTimeout  = 200 * time.Millisecond
	retryTimeout = 500 * time.Millisecond
	longTimeout  = 10 * time.Second
)

func quickBackoff(int) time.Duration { return time.Millisecond }

// testAllowance is the start allowance of the Runners over a MemStore,
// whose commits take no time: a short one keeps the retries of unknown
// outcomes, which wait for it, quick.
const testAllowance = 250 * time.Millisecond

func newTestRunner(t *testing.T, store Store, rc *receiver, onUnknown string, maxAttempts, workers int) *Runner {
	t.Helper()
	return newTestRunnerTimeout(t, store, rc, onUnknown, maxAttempts, workers, longTimeout)
}

func newTestRunnerTimeout(t *testing.T, store Store, rc *receiver, onUnknown string, maxAttempts, workers int, timeout time.Duration) *Runner {
	t.Helper()
	r, err := NewRunner(RunnerConfig{
		Store: store,
		Effects: map[string]Effect{"fx": {
			Caller:      &webhook.Client{URL: rc.srv.URL + "/notify", Timeout: timeout},
			MaxAttempts: maxAttempts, OnUnknown: onUnknown,
		}},
		Workers:        workers,
		Backoff:        quickBackoff,
		StartAllowance: testAllowance,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func entry(t *testing.T, s Store, key string) effect.Entry {
	t.Helper()
	var e effect.Entry
	if err := s.View(func(l *effect.Ledger) (err error) {
		e, _, err = l.Get(key)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return e
}

func waitStatus(t *testing.T, s Store, key string, want effect.Status) effect.Entry {
	t.Helper()
	var e effect.Entry
	testkit.Await(t, 20*time.Second, fmt.Sprintf("%s to be %v", key, want), func() bool {
		e = entry(t, s, key)
		return e.Status == want
	})
	return e
}

// TestRunnerScenarios runs one key against each receiver behaviour and checks
// the ledger's final entry and what the receiver saw.
func TestRunnerScenarios(t *testing.T) {
	for _, tc := range []struct {
		name      string
		b         behaviour
		onUnknown string
		max       int
		status    effect.Status
		attempts  int
		requests  int
		applied   int
		outcomes  []effect.Outcome
		ref       string
		timeout   time.Duration // 0: longTimeout
	}{
		{name: "succeed", status: effect.Succeeded, attempts: 1, requests: 1, applied: 1,
			outcomes: []effect.Outcome{effect.OutcomeSucceeded}, ref: "ref-k"},
		{name: "5xx twice then succeed", b: failTimes(2, 503), status: effect.Succeeded, attempts: 3, requests: 3, applied: 1,
			outcomes: []effect.Outcome{effect.OutcomeRetryable, effect.OutcomeRetryable, effect.OutcomeSucceeded}, ref: "ref-k"},
		{name: "5xx until maxAttempts", b: failTimes(100, 500), max: 3, status: effect.Failed, attempts: 3, requests: 3,
			outcomes: []effect.Outcome{effect.OutcomeRetryable, effect.OutcomeRetryable, effect.OutcomeRetryable}},
		{name: "400 is terminal", b: failTimes(100, 400), status: effect.Failed, attempts: 1, requests: 1,
			outcomes: []effect.Outcome{effect.OutcomeFailed}},
		{name: "hang past timeout, retry with same key", b: hangFirst(1), onUnknown: config.OnUnknownRetry, timeout: hangTimeout,
			status: effect.Succeeded, attempts: 2, requests: 2, applied: 1,
			outcomes: []effect.Outcome{effect.OutcomeUnknown, effect.OutcomeSucceeded}, ref: "ref-k"},
		{name: "hang past timeout, park", b: hangFirst(1), onUnknown: config.OnUnknownPark, timeout: hangTimeout,
			status: effect.Unknown, attempts: 1, requests: 1, applied: 1, outcomes: []effect.Outcome{effect.OutcomeUnknown}},
		{name: "connection dropped, retry with same key", b: dropFirst(1), onUnknown: config.OnUnknownRetry, timeout: retryTimeout,
			status: effect.Succeeded, attempts: 2, requests: 2, applied: 1,
			outcomes: []effect.Outcome{effect.OutcomeUnknown, effect.OutcomeSucceeded}, ref: "ref-k"},
		{name: "connection dropped, park", b: dropFirst(1), onUnknown: config.OnUnknownPark,
			status: effect.Unknown, attempts: 1, requests: 1, applied: 1, outcomes: []effect.Outcome{effect.OutcomeUnknown}},
		{name: "unknown every time stays unknown after maxAttempts", b: dropFirst(100), onUnknown: config.OnUnknownRetry, max: 3, timeout: retryTimeout,
			status: effect.Unknown, attempts: 3, requests: 3, applied: 1,
			outcomes: []effect.Outcome{effect.OutcomeUnknown, effect.OutcomeUnknown, effect.OutcomeUnknown}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rc := newReceiver(t, tc.b)
			store := sideeffectstest.NewMemStore()
			timeout := cmp.Or(tc.timeout, longTimeout)
			r := newTestRunnerTimeout(t, store, rc, tc.onUnknown, tc.max, 2, timeout)
			stop := runRunner(t, r)
			in := sideeffectstest.Intent(t, "k", "fx", "p")
			if _, dup, err := r.Offer(in.Value); err != nil || dup {
				t.Fatalf("offer: %v %v", dup, err)
			}
			testkit.Await(t, 20*time.Second, "final attempt", func() bool {
				e := entry(t, store, "k")
				return e.Attempts == tc.attempts && e.Status == tc.status
			})
			// A wrongly scheduled extra attempt would be made before
			// the Runner is idle.
			waitIdle(t, r)
			stop()
			e := entry(t, store, "k")
			req, app := rc.counts("k")
			if e.Status != tc.status || e.Attempts != tc.attempts || req != tc.requests || app != tc.applied || e.Ref != tc.ref {
				t.Fatalf("status %v attempts %d ref %q; receiver requests %d applied %d; want %v %d %q; %d %d",
					e.Status, e.Attempts, e.Ref, req, app, tc.status, tc.attempts, tc.ref, tc.requests, tc.applied)
			}
			var got []effect.Outcome
			for _, a := range e.History {
				got = append(got, a.Outcome)
				if a.Duration <= 0 || a.Start.IsZero() {
					t.Errorf("attempt %+v lacks timing", a)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.outcomes) {
				t.Fatalf("history %v, want %v", got, tc.outcomes)
			}
		})
	}
}

// The same intent offered twice, and the same key emitted by two projections,
// execute once.
func TestRunnerDuplicates(t *testing.T) {
	rc := newReceiver(t, nil)
	rc.delay = 20 * time.Millisecond // keep the first call in flight while duplicates arrive
	store := sideeffectstest.NewMemStore()
	r := newTestRunner(t, store, rc, "", 0, 4)
	runRunner(t, r)
	a := sideeffectstest.Intent(t, "k", "fx", "proj-a")
	b := sideeffectstest.Intent(t, "k", "fx", "proj-b")
	if _, dup, _ := r.Offer(a.Value); dup {
		t.Fatal("first offer is a duplicate")
	}
	for _, v := range [][]byte{a.Value, b.Value, a.Value} {
		if _, dup, err := r.Offer(v); err != nil || !dup {
			t.Fatalf("repeat offer: dup %v err %v", dup, err)
		}
		r.Enqueue("k")
	}
	e := waitStatus(t, store, "k", effect.Succeeded)
	waitIdle(t, r) // every repeat enqueue looked at
	if req, _ := rc.counts("k"); req != 1 || e.Attempts != 1 {
		t.Fatalf("requests %d attempts %d", req, e.Attempts)
	}
	// The first intent is the one kept and sent.
	if string(rc.bodies["k"]) != string(a.Value) {
		t.Fatalf("sent %s", rc.bodies["k"])
	}
}

// docs/design.md#one-success-per-key: a key that has succeeded is never
// executed again — not on re-offer, not on Enqueue, not by a new Runner after
// a restart.
func TestRunnerSucceededNeverAgain(t *testing.T) {
	rc := newReceiver(t, nil)
	store := sideeffectstest.NewMemStore()
	r := newTestRunner(t, store, rc, "", 0, 2)
	stop := runRunner(t, r)
	in := sideeffectstest.Intent(t, "k", "fx", "p")
	r.Offer(in.Value)
	waitStatus(t, store, "k", effect.Succeeded)
	for range 5 {
		r.Enqueue("k")
		r.Offer(in.Value)
	}
	waitIdle(t, r)
	stop()

	r2 := newTestRunner(t, store, rc, "", 0, 2)
	stop2 := runRunner(t, r2)
	r2.Enqueue("k")
	waitIdle(t, r2)
	stop2()
	if req, _ := rc.counts("k"); req != 1 {
		t.Fatalf("receiver saw %d requests for a succeeded key", req)
	}
	if e := entry(t, store, "k"); e.Status != effect.Succeeded || e.Attempts != 1 {
		t.Fatalf("entry %+v", e)
	}
	if _, err := r2.Resolve("k", effect.Failed, "no"); !errors.Is(err, effect.ErrIllegalTransition) {
		t.Fatalf("resolve of a succeeded key: %v", err)
	}
}

// crashAfterCall leaves the ledger as a process that died during its call
// would: the key offered, started (in-flight committed), the receiver
// already reached, the outcome never recorded.
func crashAfterCall(t *testing.T, store *sideeffectstest.MemStore, rc *receiver, key string) {
	t.Helper()
	in := sideeffectstest.Intent(t, key, "fx", "p")
	if err := store.Update(func(l *effect.Ledger) error {
		if _, _, err := l.Offer(in, t0); err != nil {
			return err
		}
		_, err := l.Start(key, t0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	res := (&webhook.Client{URL: rc.srv.URL}).Call(context.Background(), in, in.Value)
	if res.Outcome != effect.OutcomeSucceeded {
		t.Fatalf("pre-crash call: %v", res.Outcome)
	}
}

func TestRunnerCrashRecoveryRetry(t *testing.T) {
	rc := newReceiver(t, nil)
	store := sideeffectstest.NewMemStore()
	crashAfterCall(t, store, rc, "k")

	var sawUnknown atomic.Bool
	r, err := NewRunner(RunnerConfig{
		Store:    store,
		Effects:  map[string]Effect{"fx": {Caller: &webhook.Client{URL: rc.srv.URL, Timeout: longTimeout}, OnUnknown: config.OnUnknownRetry}},
		Backoff:  quickBackoff,
		OnChange: func(e effect.Entry) { sawUnknown.CompareAndSwap(false, e.Status == effect.Unknown) },
	})
	if err != nil {
		t.Fatal(err)
	}
	runRunner(t, r)
	e := waitStatus(t, store, "k", effect.Succeeded)
	req, app := rc.counts("k")
	if req != 2 || app != 1 || e.Attempts != 2 || e.History[0].Outcome != effect.OutcomeUnknown || !sawUnknown.Load() {
		t.Fatalf("requests %d applied %d attempts %d history %+v unknown seen %v", req, app, e.Attempts, e.History, sawUnknown.Load())
	}
}

func TestRunnerCrashRecoveryPark(t *testing.T) {
	rc := newReceiver(t, nil)
	store := sideeffectstest.NewMemStore()
	crashAfterCall(t, store, rc, "k")
	r := newTestRunner(t, store, rc, config.OnUnknownPark, 0, 2)
	runRunner(t, r)
	waitStatus(t, store, "k", effect.Unknown)
	r.Enqueue("k") // parked: an enqueue does not un-park it
	waitIdle(t, r)
	if req, _ := rc.counts("k"); req != 1 {
		t.Fatalf("parked key was called again: %d requests", req)
	}
	e, err := r.Resolve("k", effect.Succeeded, "receiver shows it applied")
	if err != nil || e.Status != effect.Succeeded || e.Resolution == nil || e.Resolution.Outcome != effect.Succeeded {
		t.Fatalf("resolve: %+v %v", e, err)
	}
	r.Enqueue("k")
	waitIdle(t, r)
	if req, _ := rc.counts("k"); req != 1 {
		t.Fatalf("resolved key was called again: %d requests", req)
	}
}

// TestUnknownWaitsForDeadline: an unknown outcome is retried no sooner than
// its attempt's deadline (as recorded: start + the start allowance + the
// effect's timeout; or so computed for an attempt that recorded none) plus
// DeadlineMargin, so that the call it stands for has ended: whether the attempt was left
// in-flight by a previous owner (recovered as unknown, NextAttempt zero) or
// lost its connection here (the receiver may still be working on it).
func TestUnknownWaitsForDeadline(t *testing.T) {
	const timeout = retryTimeout
	for _, tc := range []struct {
		name string
		b    behaviour
		prev bool // a previous owner started attempt 1
	}{
		{name: "recovered from a previous owner", prev: true},
		{name: "connection lost", b: dropFirst(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var arrived []time.Time
			rc := newReceiver(t, func(rc *receiver, w http.ResponseWriter, r *http.Request, key string, n int) bool {
				mu.Lock()
				arrived = append(arrived, time.Now())
				mu.Unlock()
				return tc.b != nil && tc.b(rc, w, r, key, n)
			})
			store := sideeffectstest.NewMemStore()
			in := sideeffectstest.Intent(t, "k", "fx", "p")
			if tc.prev {
				if err := store.Update(func(l *effect.Ledger) error {
					l.Offer(in, time.Now())
					_, err := l.Start("k", time.Now())
					return err
				}); err != nil {
					t.Fatal(err)
				}
			}
			r := newTestRunnerTimeout(t, store, rc, config.OnUnknownRetry, 0, 2, timeout)
			runRunner(t, r)
			if !tc.prev {
				r.Offer(in.Value)
			}
			e := waitStatus(t, store, "k", effect.Succeeded)
			if e.Attempts != 2 || e.History[0].Outcome != effect.OutcomeUnknown {
				t.Fatalf("entry %+v", e)
			}
			mu.Lock()
			defer mu.Unlock()
			retry := arrived[len(arrived)-1]
			deadline := e.History[0].Deadline
			if tc.prev { // started with no deadline recorded
				deadline = e.History[0].Start.Add(testAllowance + timeout)
			} else if !deadline.Equal(e.History[0].Start.Add(testAllowance + timeout)) {
				t.Fatalf("attempt 1 recorded deadline %v, want its start %v + %v + %v", deadline, e.History[0].Start, testAllowance, timeout)
			}
			deadline = deadline.Add(DeadlineMargin)
			if retry.Before(deadline) {
				t.Fatalf("retried %v before the unknown attempt's deadline", deadline.Sub(retry))
			}
			if e.History[1].Start.Before(deadline) {
				t.Fatalf("attempt 2 started at %v, deadline %v", e.History[1].Start, deadline)
			}
			t.Logf("attempt 1 at %s, retry %v after it (deadline %v after it)", e.History[0].Start.Format(time.StampMilli),
				retry.Sub(e.History[0].Start).Round(time.Millisecond), deadline.Sub(e.History[0].Start))
		})
	}
}

// The ledger records the attempt's deadline, start + StartAllowance +
// Effect.Timeout, before the call; the call gets its whole timeout from
// when it starts and never runs past the recorded deadline, which is what
// another Runner waits for before it retries.
func TestCallBoundedByDeadline(t *testing.T) {
	const timeout, allowance = 250 * time.Millisecond, time.Second
	store := sideeffectstest.NewMemStore()
	var deadline, began time.Time
	var bounded bool
	probe := callerFunc(func(ctx context.Context, in effect.Intent, body []byte) effect.Result {
		began = time.Now()
		deadline, bounded = ctx.Deadline()
		return effect.Result{Outcome: effect.OutcomeSucceeded}
	})
	r, _ := NewRunner(RunnerConfig{Store: store, StartAllowance: allowance, Effects: map[string]Effect{"fx": {Caller: probe, Timeout: timeout}}})
	runRunner(t, r)
	r.Offer(sideeffectstest.Intent(t, "k", "fx", "p").Value)
	e := waitStatus(t, store, "k", effect.Succeeded)
	a := e.History[0]
	if want := a.Start.Add(allowance + timeout); !a.Deadline.Equal(want) {
		t.Fatalf("recorded deadline %v, want start + allowance + timeout %v", a.Deadline, want)
	}
	// Not to the nanosecond: the Runner reads its clock, then calls.
	if left := deadline.Sub(began); !bounded || deadline.After(a.Deadline) || left > timeout || left < timeout-50*time.Millisecond {
		t.Fatalf("call deadline %v (set %v), %v after the call began; want its whole timeout %v, by the recorded deadline %v",
			deadline, bounded, left, timeout, a.Deadline)
	}
}

// N workers bound the concurrent calls; every key runs exactly once.
func TestRunnerConcurrency(t *testing.T) {
	rc := newReceiver(t, nil)
	rc.delay = 5 * time.Millisecond
	store := sideeffectstest.NewMemStore()
	r := newTestRunner(t, store, rc, "", 0, 3)
	const n = 30
	// Half offered before Run (picked up by the initial scan), half after.
	for i := range n / 2 {
		if _, _, err := r.Offer(sideeffectstest.Intent(t, fmt.Sprintf("k%02d", i), "fx", "p").Value); err != nil {
			t.Fatal(err)
		}
	}
	runRunner(t, r)
	var wg sync.WaitGroup
	for i := n / 2; i < n; i++ {
		wg.Go(func() { r.Offer(sideeffectstest.Intent(t, fmt.Sprintf("k%02d", i), "fx", "p").Value) })
	}
	wg.Wait()
	testkit.Await(t, 20*time.Second, "all succeeded", func() bool {
		var es []effect.Entry
		store.View(func(l *effect.Ledger) (err error) { es, err = l.List(effect.Succeeded); return err })
		return len(es) == n
	})
	if got := rc.totalRequests(); got != n {
		for k, c := range rc.requests {
			if c != 1 {
				t.Logf("%s: %d requests, entry %+v", k, c, entry(t, store, k).History)
			}
		}
		t.Fatalf("%d requests for %d keys", got, n)
	}
	if p := rc.peak.Load(); p > 3 {
		t.Fatalf("peak concurrency %d with 3 workers", p)
	}
}

// failingStore fails every Update whose fn would start an attempt.
type failingStore struct {
	*sideeffectstest.MemStore
	err error
}

func (s failingStore) Update(fn func(*effect.Ledger) error) error {
	return s.MemStore.Update(func(l *effect.Ledger) error {
		if err := fn(l); err != nil {
			return err
		}
		if es, _ := l.List(effect.InFlight); len(es) > 0 {
			return s.err // the commit of the in-flight mark fails
		}
		return nil
	})
}

// docs/design.md#in-flight-before-call: the executor runs only after the
// in-flight mark is committed.
// If that commit fails, nothing is called and Run reports the error.
func TestRunnerInFlightBeforeCall(t *testing.T) {
	rc := newReceiver(t, nil)
	store := sideeffectstest.NewMemStore()

	// The committed state, as seen from inside the executor, is in-flight.
	var seen effect.Status
	probe := callerFunc(func(ctx context.Context, in effect.Intent, body []byte) effect.Result {
		seen = entry(t, store, in.Key).Status
		return effect.Result{Outcome: effect.OutcomeSucceeded}
	})
	r, _ := NewRunner(RunnerConfig{Store: store, Effects: map[string]Effect{"fx": {Caller: probe}}})
	stop := runRunner(t, r)
	r.Offer(sideeffectstest.Intent(t, "a", "fx", "p").Value)
	waitStatus(t, store, "a", effect.Succeeded)
	stop()
	if seen != effect.InFlight {
		t.Fatalf("executor saw committed status %v", seen)
	}

	boom := errors.New("commit failed")
	fs := failingStore{MemStore: sideeffectstest.NewMemStore(), err: boom}
	r2 := newTestRunner(t, fs, rc, "", 0, 2)
	r2.Offer(sideeffectstest.Intent(t, "b", "fx", "p").Value)
	if err := r2.Run(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("Run = %v, want the store error", err)
	}
	if req, _ := rc.counts("b"); req != 0 {
		t.Fatalf("executor called although the in-flight mark was not committed (%d requests)", req)
	}
	if e := entry(t, fs.MemStore, "b"); e.Status != effect.Pending || e.Attempts != 0 {
		t.Fatalf("entry after failed start: %+v", e)
	}
}

type callerFunc func(ctx context.Context, in effect.Intent, body []byte) effect.Result

func (f callerFunc) Call(ctx context.Context, in effect.Intent, body []byte) effect.Result {
	return f(ctx, in, body)
}

func TestRunnerConfig(t *testing.T) {
	for _, c := range []RunnerConfig{
		{},
		{Store: sideeffectstest.NewMemStore(), Workers: -1},
		{Store: sideeffectstest.NewMemStore(), Effects: map[string]Effect{"x": {}}},
		{Store: sideeffectstest.NewMemStore(), Effects: map[string]Effect{"x": {Caller: &webhook.Client{}, OnUnknown: "maybe"}}},
	} {
		if _, err := NewRunner(c); err == nil {
			t.Errorf("NewRunner(%+v) accepted", c)
		}
	}
	r, _ := NewRunner(RunnerConfig{Store: sideeffectstest.NewMemStore()})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := r.Run(ctx); err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	if err := r.Run(context.Background()); err == nil {
		t.Fatal("second Run accepted")
	}
}

// fakeClock is a Runner's injected clock, moved by the test.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// TestUnknownWaitsForRecordedDeadline: an instance whose webhook timeout
// was 30 s started attempt 1 of a key and stopped (a rolling restart that
// lowers the timeout to 5 s); the next owner recovers the attempt as
// unknown. Its call may run until the deadline the ledger recorded for it,
// start + 30 s, so the retry waits for the later of that and the current
// rule (start + start allowance + timeout), plus DeadlineMargin – on the
// injected clock – and an attempt of an older version, with no recorded
// deadline, falls back to the current rule
// (docs/design.md#one-call-in-flight-per-key).
func TestUnknownWaitsForRecordedDeadline(t *testing.T) {
	const timeout, allowance = 5 * time.Second, 2 * time.Second
	for _, tc := range []struct {
		name     string
		recorded time.Duration // 0: none recorded
		due      time.Duration // after the start
	}{
		{name: "recorded start+30s, timeout now 5s", recorded: 30 * time.Second, due: 30*time.Second + DeadlineMargin},
		{name: "recorded start+2s, timeout now 5s", recorded: 2 * time.Second, due: allowance + timeout + DeadlineMargin},
		{name: "none recorded", due: allowance + timeout + DeadlineMargin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := sideeffectstest.NewMemStore()
			if err := store.Update(func(l *effect.Ledger) error {
				l.Offer(sideeffectstest.Intent(t, "k", "fx", "p"), t0)
				var deadline time.Time
				if tc.recorded > 0 {
					deadline = t0.Add(tc.recorded)
				}
				if _, err := l.StartUntil("k", t0, deadline); err != nil {
					return err
				}
				_, err := l.Recover(t0.Add(time.Second))
				return err
			}); err != nil {
				t.Fatal(err)
			}
			clock := &fakeClock{}
			var calls atomic.Int32
			probe := callerFunc(func(context.Context, effect.Intent, []byte) effect.Result {
				calls.Add(1)
				return effect.Result{Outcome: effect.OutcomeSucceeded, StatusCode: 200}
			})
			r, err := NewRunner(RunnerConfig{Store: store, Now: clock.Now, Backoff: quickBackoff, StartAllowance: allowance,
				Effects: map[string]Effect{"fx": {Caller: probe, Timeout: timeout, OnUnknown: config.OnUnknownRetry}}})
			if err != nil {
				t.Fatal(err)
			}
			for _, at := range []time.Duration{timeout + DeadlineMargin, 10 * time.Second, 30 * time.Second, tc.due - time.Nanosecond} {
				if at >= tc.due {
					continue
				}
				clock.Set(t0.Add(at))
				if err := r.process(context.Background(), "k"); err != nil {
					t.Fatal(err)
				}
				if n := calls.Load(); n != 0 {
					t.Fatalf("retried at start+%s, before start+%s", at, tc.due)
				}
				if e := entry(t, store, "k"); e.Status != effect.Unknown || e.Attempts != 1 {
					t.Fatalf("at start+%s: entry %v after %d attempts", at, e.Status, e.Attempts)
				}
			}
			clock.Set(t0.Add(tc.due))
			if err := r.process(context.Background(), "k"); err != nil {
				t.Fatal(err)
			}
			if e := entry(t, store, "k"); calls.Load() != 1 || e.Status != effect.Succeeded || e.Attempts != 2 {
				t.Fatalf("at start+%s: %d calls, entry %v after %d attempts; want the retry", tc.due, calls.Load(), e.Status, e.Attempts)
			}
		})
	}
}

// slowStartStore is a MemStore whose commit of an in-flight mark takes
// delay (a slow Kafka transaction or Pebble sync): Update returns that much
// after fn ran – after the attempt's start was taken – when fn left an
// entry in-flight, and at once otherwise.
type slowStartStore struct {
	*sideeffectstest.MemStore
	delay func() time.Duration
}

func (s slowStartStore) Update(fn func(*effect.Ledger) error) error {
	started := false
	err := s.MemStore.Update(func(l *effect.Ledger) error {
		if err := fn(l); err != nil {
			return err
		}
		es, err := l.List(effect.InFlight)
		started = len(es) > 0
		return err
	})
	if err == nil && started {
		time.Sleep(s.delay()) // sleep ok: the fault itself, a slow commit of the in-flight mark
	}
	return err
}

// TestSlowStartCommitStillCalls: the commit of the in-flight mark takes
// twice the webhook timeout. The receiver must still get the call, with
// its whole timeout from the moment the call can start, and the key
// succeed at its first attempt. Before issue 22's fix the attempt's
// deadline ran from inside the transaction, every call went out with an
// expired context, each counted as an attempt, and the key was failed
// after maxAttempts with no request at the receiver (defect 3).
func TestSlowStartCommitStillCalls(t *testing.T) {
	const timeout = 300 * time.Millisecond
	rc := newReceiver(t, nil)
	store := slowStartStore{MemStore: sideeffectstest.NewMemStore(), delay: func() time.Duration { return 2 * timeout }}
	var mu sync.Mutex
	var left []time.Duration // of the call's timeout, when it started
	wh := &webhook.Client{URL: rc.srv.URL, Timeout: timeout}
	probe := callerFunc(func(ctx context.Context, in effect.Intent, body []byte) effect.Result {
		if d, ok := ctx.Deadline(); ok {
			mu.Lock()
			left = append(left, time.Until(d))
			mu.Unlock()
		}
		return wh.Call(ctx, in, body)
	})
	r, err := NewRunner(RunnerConfig{Store: store, Backoff: quickBackoff,
		Effects: map[string]Effect{"fx": {Caller: probe, Timeout: timeout, MaxAttempts: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	runRunner(t, r)
	if _, _, err := r.Offer(sideeffectstest.Intent(t, "k", "fx", "p").Value); err != nil {
		t.Fatal(err)
	}
	var e effect.Entry
	testkit.Await(t, 20*time.Second, "k to settle", func() bool {
		e = entry(t, store.MemStore, "k")
		return e.Status.Terminal()
	})
	req, _ := rc.counts("k")
	mu.Lock()
	defer mu.Unlock()
	if e.Status != effect.Succeeded || e.Attempts != 1 || req != 1 {
		t.Fatalf("key %v after %d attempts, %d requests at the receiver; want succeeded after 1 attempt, 1 request; history %+v",
			e.Status, e.Attempts, req, e.History)
	}
	// Not to the nanosecond: the clock is read twice.
	if len(left) != 1 || left[0] < timeout-50*time.Millisecond {
		t.Fatalf("the call started with %v of its %v timeout left", left, timeout)
	}
}

// changes records the entries a Runner reports (RunnerConfig.OnChange).
type changes struct {
	mu sync.Mutex
	es []effect.Entry
}

func (c *changes) add(e effect.Entry) {
	c.mu.Lock()
	c.es = append(c.es, e)
	c.mu.Unlock()
}

// withdrawals counts the withdrawals of a key's first attempt among them:
// a return to pending with no attempt counted.
func (c *changes) withdrawals() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.es {
		if e.Status == effect.Pending && e.Attempts == 0 && len(e.History) == 0 {
			n++
		}
	}
	return n
}

// TestSlowStartCommitWithdraws: every commit of an in-flight mark takes
// longer than the start allowance. The attempts it leaves too little time
// are withdrawn, not called and not counted, and each withdrawal doubles
// the key's allowance until the commit fits: the key is then called once,
// with its whole timeout, and succeeds at attempt 1 – even with
// maxAttempts 1.
func TestSlowStartCommitWithdraws(t *testing.T) {
	const timeout, allowance, commit = time.Second, 100 * time.Millisecond, 300 * time.Millisecond
	rc := newReceiver(t, nil)
	store := slowStartStore{MemStore: sideeffectstest.NewMemStore(), delay: func() time.Duration { return commit }}
	var ch changes
	r, err := NewRunner(RunnerConfig{Store: store, Backoff: quickBackoff, StartAllowance: allowance, OnChange: ch.add,
		Effects: map[string]Effect{"fx": {Caller: &webhook.Client{URL: rc.srv.URL, Timeout: timeout}, Timeout: timeout, MaxAttempts: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	runRunner(t, r)
	r.Offer(sideeffectstest.Intent(t, "k", "fx", "p").Value)
	var e effect.Entry
	testkit.Await(t, 20*time.Second, "k to settle", func() bool {
		e = entry(t, store.MemStore, "k")
		return e.Status.Terminal()
	})
	req, _ := rc.counts("k")
	// 100 ms and 200 ms are too little for a 300 ms commit, 400 ms is enough.
	if e.Status != effect.Succeeded || e.Attempts != 1 || len(e.History) != 1 || req != 1 || ch.withdrawals() != 2 {
		t.Fatalf("%v after %d attempts (history %+v), %d requests, %d withdrawals; want succeeded after 1 attempt, 1 request, 2 withdrawals",
			e.Status, e.Attempts, e.History, req, ch.withdrawals())
	}
	if a := e.History[0]; !a.Deadline.Equal(a.Start.Add(4*allowance + timeout)) {
		t.Fatalf("the called attempt's deadline is start + %v, want start + %v", a.Deadline.Sub(a.Start), 4*allowance+timeout)
	}
}

// TestNotSentIsNoAttempt: a Caller whose request never left
// (effect.Result.NotSent) has made no attempt: the Runner withdraws it and
// calls again, so a key with maxAttempts 1 still succeeds at attempt 1.
func TestNotSentIsNoAttempt(t *testing.T) {
	store := sideeffectstest.NewMemStore()
	var calls atomic.Int32
	probe := callerFunc(func(context.Context, effect.Intent, []byte) effect.Result {
		if calls.Add(1) <= 2 {
			return effect.Result{Outcome: effect.OutcomeRetryable, NotSent: true, Err: errors.New("not sent")}
		}
		return effect.Result{Outcome: effect.OutcomeSucceeded, StatusCode: 200}
	})
	r, err := NewRunner(RunnerConfig{Store: store, Backoff: quickBackoff, StartAllowance: testAllowance,
		Effects: map[string]Effect{"fx": {Caller: probe, MaxAttempts: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	runRunner(t, r)
	r.Offer(sideeffectstest.Intent(t, "k", "fx", "p").Value)
	e := waitStatus(t, store, "k", effect.Succeeded)
	if e.Attempts != 1 || len(e.History) != 1 || calls.Load() != 3 {
		t.Fatalf("succeeded after %d attempts (history %+v), %d calls; want 1 attempt, 3 calls", e.Attempts, e.History, calls.Load())
	}
}

// TestWithdrawalHandedOver: the partition is revoked while the commit of
// an in-flight mark is slow, so the Runner that withdraws the attempt
// cannot record the withdrawal. It hands it over (and reports it); the
// partition's next Runner in the process withdraws the attempt rather than
// take it for an unknown outcome – which it would wait for and retry as a
// second attempt – and calls the key once.
func TestWithdrawalHandedOver(t *testing.T) {
	const timeout, allowance = time.Second, 100 * time.Millisecond
	rc := newReceiver(t, nil)
	mem := sideeffectstest.NewMemStore()
	calls := newCallRegistry()
	slowing := make(chan struct{})
	var first sync.Once
	old := &revocableStore{MemStore: mem}
	slow := slowStartStore{MemStore: mem, delay: func() time.Duration {
		first.Do(func() { close(slowing) })
		return 3 * allowance
	}}
	var reported atomic.Int32
	newRunner := func(s Store) *Runner {
		r, err := NewRunner(RunnerConfig{Store: s, Backoff: quickBackoff, StartAllowance: allowance, calls: calls, Scope: "p0",
			ReportWithdrawal: func(key string, n int, start, next time.Time) {
				if key == "k" && n == 1 && !start.IsZero() {
					reported.Add(1)
				}
			},
			Effects: map[string]Effect{"fx": {Caller: &webhook.Client{URL: rc.srv.URL, Timeout: timeout}, Timeout: timeout,
				OnUnknown: config.OnUnknownRetry}}})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// The first Runner's commits are slow, and refused once it is revoked.
	r1 := newRunner(storeFunc{update: func(fn func(*effect.Ledger) error) error {
		if old.revoked.Load() {
			return ErrRevoked
		}
		return slow.Update(fn)
	}, view: mem.View})
	ctx, revoke := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r1.Run(ctx) }()
	if _, _, err := r1.Offer(sideeffectstest.Intent(t, "k", "fx", "p").Value); err != nil {
		t.Fatal(err)
	}
	<-slowing // attempt 1 is committed; its Runner does not know yet
	old.revoked.Store(true)
	revoke()
	<-done // once its attempts are over: the withdrawal handed over
	if e := entry(t, mem, "k"); e.Status != effect.InFlight || e.Attempts != 1 {
		t.Fatalf("after the revoke: %v at attempt %d, want in-flight at 1 (the withdrawal not recorded)", e.Status, e.Attempts)
	}
	r2 := newRunner(&revocableStore{MemStore: mem})
	runRunner(t, r2)
	e := waitStatus(t, mem, "k", effect.Succeeded)
	req, _ := rc.counts("k")
	if e.Attempts != 1 || len(e.History) != 1 || req != 1 || reported.Load() != 1 {
		t.Fatalf("succeeded after %d attempts (history %+v), %d requests, withdrawal reported %d times; want 1, 1, 1",
			e.Attempts, e.History, req, reported.Load())
	}
}

// storeFunc is a Store made of functions.
type storeFunc struct {
	update func(func(*effect.Ledger) error) error
	view   func(func(*effect.Ledger) error) error
}

func (s storeFunc) Update(fn func(*effect.Ledger) error) error { return s.update(fn) }
func (s storeFunc) View(fn func(*effect.Ledger) error) error   { return s.view(fn) }

// TestRunnerOutlivesAttemptSettledUnderIt: while a call runs, a record on
// the effects topic (a well-formed executor report, here applied to the
// ledger directly) settles its attempt. The Runner cannot record the
// call's outcome – the ledger has moved on – and must go on executing the
// partition's other keys rather than stop.
func TestRunnerOutlivesAttemptSettledUnderIt(t *testing.T) {
	store := sideeffectstest.NewMemStore()
	calling, release := make(chan struct{}), make(chan struct{})
	var first sync.Once
	probe := callerFunc(func(_ context.Context, in effect.Intent, _ []byte) effect.Result {
		if in.Key == "k1" {
			first.Do(func() { close(calling) })
			<-release
		}
		return effect.Result{Outcome: effect.OutcomeSucceeded, StatusCode: 200}
	})
	r, err := NewRunner(RunnerConfig{Store: store, Backoff: quickBackoff, StartAllowance: testAllowance,
		Effects: map[string]Effect{"fx": {Caller: probe}}})
	if err != nil {
		t.Fatal(err)
	}
	stop := runRunner(t, r)
	r.Offer(sideeffectstest.Intent(t, "k1", "fx", "p").Value)
	<-calling
	if err := store.Update(func(l *effect.Ledger) error {
		_, err := l.Settle("k1", 1, effect.Attempt{StatusCode: 500}, effect.Failed, time.Time{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	close(release)
	r.Offer(sideeffectstest.Intent(t, "k2", "fx", "p").Value)
	waitStatus(t, store, "k2", effect.Succeeded)
	if e := entry(t, store, "k1"); e.Status != effect.Failed {
		t.Fatalf("k1: %v, want the settled failed to stand", e.Status)
	}
	stop() // Run returns nil
}
