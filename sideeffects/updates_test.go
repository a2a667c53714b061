package sideeffects

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/seam"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/sideeffects/effect"
	"github.com/projector-dev/projector/sideeffects/sideeffectstest"
	"github.com/projector-dev/projector/sideeffects/webhook"
)

// updateWithin runs one taskStore Update and returns its error, or fails the
// test if it has not returned within d: a request nobody will answer must
// show as a failure, not as a hang of the suite.
func updateWithin(t *testing.T, s *taskStore, d time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Update(func(*effect.Ledger) error { return nil }) }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		t.Fatalf("Update did not return within %s: its request was queued where nothing will answer it", d)
		return nil
	}
}

// TestUpdateRacesStop makes the race between a Runner's Update and the end
// of the queue happen on purpose: the worker's test hook runs between
// Update's decision to queue its request and the append, and there it stops
// the queue – failRequests, as Worker.Run does once the loop is gone, or the
// partition's revoke. No loop runs in this test, so a request queued after
// either is never answered (after failRequests, none would run in a real
// worker either). Update must refuse at once instead.
func TestUpdateRacesStop(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func(w *Worker, wt *workerTask)
		want error
	}{
		{name: "failRequests", stop: func(w *Worker, _ *workerTask) { w.failRequests(errLoopStopped) }, want: errLoopStopped},
		{name: "revoke", stop: func(_ *Worker, wt *workerTask) { wt.Revoked() }, want: ErrRevoked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := NewWorker(withStore(&state.Store{}, WorkerConfig{
				Session:      Session{Name: "fx", InstanceID: "w1", Brokers: []string{"127.0.0.1:1"}},
				EffectsTopic: "fx.effects",
			}))
			if err != nil {
				t.Fatal(err)
			}
			wt := &workerTask{w: w, runner: &Runner{}, cancel: func() {}}
			var hit atomic.Int32
			w.testHook = func(point string) {
				if point == hookEnqueue && hit.Add(1) == 1 {
					tc.stop(w, wt)
				}
			}
			err = updateWithin(t, (*taskStore)(wt), 5*time.Second)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Update = %v, want %v", err, tc.want)
			}
			if hit.Load() != 1 {
				t.Fatalf("the hook ran %d times, want 1: the race was not forced", hit.Load())
			}
			w.mu.Lock()
			left := len(w.requests)
			w.mu.Unlock()
			if left != 0 {
				t.Fatalf("%d requests left in the queue", left)
			}
		})
	}
}

// TestWorkerRunReturnsWithRunnerInUpdate is the same race in a running
// worker: its Runner's first Update (Recover) is held in the window while
// the loop stops (a crash in AfterStage) and Run answers the queue; then it
// goes on. Run must return the loop's error rather than wait for ever for
// a Runner whose request nobody will answer.
func TestWorkerRunReturnsWithRunnerInUpdate(t *testing.T) {
	const topic = "fx.effects"
	_, brokers := testkit.Broker(t, 1, topic)
	st, err := state.Open(filepath.Join(t.TempDir(), "w1"), state.Options{CacheBytes: 1 << 20, MemTableBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	crash := errors.New("crash in AfterStage")
	var failing atomic.Bool
	rc := newReceiver(t, nil)
	w, err := NewWorker(WorkerConfig{
		Session: Session{Name: "fx", InstanceID: "w1", Brokers: brokers, DeadLetterTopic: "fx.dlq", Partitions: 1,
			TransactionTimeout: 10 * time.Second, SessionTimeout: 6 * time.Second},
		EffectsTopic: topic,
		Effects:      map[string]Effect{"fx": {Caller: &webhook.Client{URL: rc.srv.URL, Timeout: longTimeout}}},
		seams: seam.Seams{Store: st, Hooks: &eos.Hooks{AfterStage: func() error {
			if failing.Load() {
				return crash
			}
			return nil
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var first, failed sync.Once
	w.testHook = func(point string) {
		switch point {
		case hookEnqueue:
			first.Do(func() {
				close(entered)
				<-release
			})
		case hookRequestsFailed:
			failed.Do(func() { close(release) })
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-entered:
	case err := <-done:
		t.Fatalf("Run returned before its Runner started: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the Runner did not start within 30s")
	}
	// The Runner waits in the window; make the loop crash in its next
	// transaction, which an intent starts.
	failing.Store(true)
	in := sideeffectstest.Intent(t, "k", "fx", "p")
	if err := testkit.Produce(context.Background(), brokers, topic, []workload.Record{{Key: []byte("k"), Value: in.Value}}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, crash) {
			t.Fatalf("Run = %v, want the loop's error %v", err, crash)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30s of the loop's crash: its Runner waits for an answer to a request queued after failRequests")
	}
}
