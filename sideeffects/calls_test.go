package sideeffects

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/sideeffects/effect"
	"github.com/projector-dev/projector/sideeffects/sideeffectstest"
	"github.com/projector-dev/projector/sideeffects/webhook"
)

func TestCallsOneHolderPerKey(t *testing.T) {
	c := newCallRegistry()
	ctx := context.Background()
	a, err := c.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// Another key is independent.
	other, err := c.Acquire(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	other.Release()

	// A second holder of k waits for the first.
	got := make(chan *callSlot)
	go func() {
		s, err := c.Acquire(ctx, "k")
		if err != nil {
			t.Error(err)
		}
		got <- s
	}()
	select {
	case <-got:
		t.Fatal("a second holder acquired a held key")
	case <-time.After(30 * time.Millisecond):
	}
	// Giving up the wait returns the context's error and holds nothing.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if s, err := c.Acquire(cctx, "k"); s != nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a cancelled context: %v %v", s, err)
	}
	a.Release()
	b := <-got
	a.Release() // a second Release of a freed slot must not free b's
	if c.held["k"] == nil {
		t.Fatal("a stale Release freed the key's next holder")
	}
	b.Release()
	if len(c.held) != 0 {
		t.Fatalf("held after release: %v", c.held)
	}
}

func TestCallsHandOver(t *testing.T) {
	c := newCallRegistry()
	now := t0
	c.now = func() time.Time { return now }
	ctx := context.Background()

	s, _ := c.Acquire(ctx, "k")
	s.HandOver(orphan{Scope: "p0", N: 3, Result: effect.Result{Outcome: effect.OutcomeSucceeded, StatusCode: 201}})
	s.Release() // after HandOver: a no-op

	s, _ = c.Acquire(ctx, "k")
	if _, ok := s.Take("p1"); ok {
		t.Fatal("another ledger's Runner took the orphan")
	}
	o, ok := s.Take("p0")
	if !ok || o.N != 3 || o.Result.StatusCode != 201 {
		t.Fatalf("take: %+v %v", o, ok)
	}
	if _, ok := s.Take("p0"); ok {
		t.Fatal("an orphan was taken twice")
	}
	s.Release()

	// Nobody comes for it: it expires.
	s, _ = c.Acquire(ctx, "k")
	s.HandOver(orphan{Scope: "p0", N: 4})
	s, _ = c.Acquire(ctx, "k2")
	s.HandOver(orphan{Scope: "p0", N: 1})
	now = now.Add(orphanTTL)
	s, _ = c.Acquire(ctx, "k")
	if _, ok := s.Take("p0"); ok {
		t.Fatal("an expired orphan was taken")
	}
	s.Release()
	if len(c.left) != 0 || len(c.held) != 0 {
		t.Fatalf("left %d orphans, %d held", len(c.left), len(c.held))
	}
}

// revocableStore refuses every update once revoked, as the worker's
// taskStore does for the Runner of a revoked partition (workerTask.revoked).
type revocableStore struct {
	*sideeffectstest.MemStore
	revoked atomic.Bool
}

func (s *revocableStore) Update(fn func(*effect.Ledger) error) error {
	if s.revoked.Load() {
		return ErrRevoked
	}
	return s.MemStore.Update(fn)
}

// TestOneCallPerKeyAcrossRunners is the quick revoke and re-assign in one
// process: the partition's Runner is revoked while its call is in flight
// (its context cancelled, its store refusing updates), and the partition's
// next Runner, over the same ledger and sharing the worker's callRegistry,
// recovers the key as unknown under onUnknown: retry. The receiver answers 409 to a
// concurrent duplicate. It must never see two requests for the key at once;
// the key must be called once, and recorded as succeeded, not failed.
//
// "overrun": the call outlives its deadline (an executor that does not honour
// the context; a clock), so the new Runner finds the key due while the old
// call is still running, and only the callRegistry stops a second call. "in
// time": the deadline rule already keeps the calls apart, and the
// callRegistry hands the old call's success over instead of a second call.
func TestOneCallPerKeyAcrossRunners(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration // Effect.Timeout
		delay   time.Duration // the receiver's
		overrun bool
	}{
		{name: "in time", timeout: 1500 * time.Millisecond, delay: 200 * time.Millisecond},
		{name: "overrun", timeout: 100 * time.Millisecond, delay: 2 * time.Second, overrun: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rc := sideeffectstest.NewIdemReceiver(t, func() time.Duration { return tc.delay })
			mem := sideeffectstest.NewMemStore()
			calls := newCallRegistry()
			newRunner := func(s Store) *Runner {
				wh := &webhook.Client{URL: rc.URL, Timeout: longTimeout}
				var ex Caller = wh
				if tc.overrun {
					ex = callerFunc(func(ctx context.Context, in effect.Intent, body []byte) effect.Result {
						return wh.Call(context.WithoutCancel(ctx), in, body)
					})
				}
				r, err := NewRunner(RunnerConfig{
					Store:   s,
					Effects: map[string]Effect{"fx": {Caller: ex, Timeout: tc.timeout, OnUnknown: config.OnUnknownRetry}},
					Backoff: quickBackoff, calls: calls, Scope: "p0",
					// Short, so that in "overrun" the old call outlives
					// the attempt's recorded deadline.
					StartAllowance: 50 * time.Millisecond,
				})
				if err != nil {
					t.Fatal(err)
				}
				return r
			}

			old := &revocableStore{MemStore: mem}
			r1 := newRunner(old)
			ctx, revoke := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r1.Run(ctx) }()
			if _, _, err := r1.Offer(sideeffectstest.Intent(t, "k", "fx", "p").Value); err != nil {
				t.Fatal(err)
			}
			testkit.Await(t, 20*time.Second, "the first call to reach the receiver", func() bool { return rc.Key("k").Open > 0 })
			old.revoked.Store(true)
			revoke()

			r2 := newRunner(&revocableStore{MemStore: mem})
			runRunner(t, r2)
			var e effect.Entry
			testkit.Await(t, 20*time.Second, "an outcome", func() bool {
				e = entry(t, mem, "k")
				return e.Status.Terminal()
			})
			// The revoked Runner's Run returns once its call has returned.
			<-done
			waitIdle(t, r2) // a wrong extra call would be made before r2 is idle
			k := rc.Key("k")
			if k.MaxOpen != 1 || k.Conflicts != 0 {
				t.Errorf("the receiver had %d requests for the key open at once (%d answered 409)", k.MaxOpen, k.Conflicts)
			}
			if k.Requests != 1 || k.Created != 1 {
				t.Errorf("the receiver saw %d requests (%d applying), want 1", k.Requests, k.Created)
			}
			if e = entry(t, mem, "k"); e.Status != effect.Succeeded || e.Attempts != 1 || e.Ref != "ref-k" {
				t.Errorf("ledger: %v after %d attempts, ref %q; want succeeded after 1; history %+v", e.Status, e.Attempts, e.Ref, e.History)
			}
			calls.mu.Lock()
			held, left := len(calls.held), len(calls.left)
			calls.mu.Unlock()
			if held != 0 || left != 0 {
				t.Errorf("the callRegistry keeps %d slots and %d orphans after the key settled", held, left)
			}
		})
	}
}
