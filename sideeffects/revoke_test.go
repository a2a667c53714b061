package sideeffects_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/operator/ops"
	"github.com/projector-dev/projector/sideeffects"
	"github.com/projector-dev/projector/sideeffects/effect"
	"github.com/projector-dev/projector/sideeffects/sideeffectstest"
	"github.com/projector-dev/projector/sideeffects/webhook"
)

// logTally counts log messages (a worker's logger), and keeps the warnings
// and errors to show when the test fails.
type logTally struct {
	mu    sync.Mutex
	n     map[string]int
	worse []string
}

func (h *logTally) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (h *logTally) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n[r.Message]++
	if r.Level >= slog.LevelWarn && len(h.worse) < 200 {
		var b strings.Builder
		r.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, " %s", a); return true })
		h.worse = append(h.worse, r.Level.String()+" "+r.Message+b.String())
	}
	return nil
}
func (h *logTally) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logTally) WithGroup(string) slog.Handler      { return h }

func (h *logTally) count(prefix string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for m, c := range h.n {
		if strings.HasPrefix(m, prefix) {
			n += c
		}
	}
	return n
}

// TestExecutorRevokeReassignSlowWebhooks: two executor instances (their own
// Pebble stores, one group) share a 2-partition effects topic; intents
// arrive continuously; every webhook call takes 0.5-2 s; the second
// instance is started and stopped again and again, so that partitions move
// away from and back to the first one while its calls are in flight, the
// moves quick and slow. The receiver is idempotent and answers 409 to a
// duplicate that arrives while the first request is open.
//
// It must never see two requests for one key at once (the deadline rule
// across instances, the callRegistry within one); every key must end
// succeeded in the ledger, with exactly one applying 2xx (201); no key may be recorded
// failed; and no instance may call a key twice (a partition given back to
// w1 records the outcome of the call its revoked Runner made). A revoke
// counts as "during a call" when the partition's next owner recovers an
// in-flight entry the previous one left: that must have happened, or the
// test proved nothing.
func TestExecutorRevokeReassignSlowWebhooks(t *testing.T) {
	t.Parallel() // mostly waits: webhooks answering in 0.5-2s, lives paced past their deadlines
	const topic = "fx.effects"
	_, brokers := testkit.Broker(t, 2, topic)
	ctx := context.Background()
	rc := sideeffectstest.NewIdemReceiver(t, func() time.Duration {
		return time.Duration(500+rand.IntN(1500)) * time.Millisecond
	})
	// Twice the slowest answer: every outcome is known unless a revoke
	// intervenes, so an instance that calls a key twice has not recorded
	// (or handed over) the first call's success.
	const timeout = 4 * time.Second
	effects := func(id string) map[string]sideeffects.Effect {
		return map[string]sideeffects.Effect{"notify": {
			Caller: &webhook.Client{URL: rc.URL + "/" + id, Timeout: timeout}, Timeout: timeout,
			MaxAttempts: 50, OnUnknown: config.OnUnknownRetry,
		}}
	}

	logs := &logTally{n: map[string]int{}}
	var recovered, failed atomic.Int64
	onChange := func(e effect.Entry) {
		switch {
		case e.Status == effect.Failed:
			failed.Add(1)
		case e.Status == effect.Unknown && len(e.History) > 0 && strings.HasPrefix(e.History[len(e.History)-1].Error, "recovered"):
			recovered.Add(1)
		}
	}
	type instance struct {
		w      *sideeffects.Worker
		st     *state.Store
		cancel context.CancelFunc
		done   chan error
	}
	start := func(id, dir string) *instance {
		st, err := state.Open(dir, state.Options{CacheBytes: 1 << 20, MemTableBytes: 1 << 20})
		if err != nil {
			t.Fatal(err)
		}
		w, err := sideeffects.NewWorker(withStore(st, sideeffects.WorkerConfig{
			Session: sideeffects.Session{
				Name: "fx", InstanceID: id, Brokers: brokers, DeadLetterTopic: "fx.dlq", Partitions: 2, TransactionTimeout: 10 * time.Second, SessionTimeout: 6 * time.Second,
				Logger: slog.New(logs).With("instance", id),
			},
			EffectsTopic: topic,
			Effects:      effects(id), Workers: 8,

			OnChange: onChange,
		}))
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		in := &instance{w: w, st: st, cancel: cancel, done: make(chan error, 1)}
		go func() { in.done <- w.Run(rctx) }()
		return in
	}
	stop := func(in *instance) {
		in.cancel()
		if err := <-in.done; err != nil {
			t.Errorf("worker: %v", err)
		}
		in.st.Close()
	}
	assigned := func(in *instance) int { return len(in.w.Stats().Assigned()) }
	defer func() {
		if t.Failed() {
			logs.mu.Lock()
			t.Logf("warnings and errors:\n%s", strings.Join(logs.worse, "\n"))
			logs.mu.Unlock()
		}
	}()

	// Intents, continuously, each key once, keyed by the idempotency key
	// as the processor produces them.
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var (
		keysMu sync.Mutex
		keys   []string
	)
	pctx, stopProducing := context.WithCancel(ctx)
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		for i := 0; pctx.Err() == nil; i++ {
			key := fmt.Sprintf("k-%04d", i)
			v := fmt.Sprintf(`{"key":%q,"effect":"notify","projection":"p","aggregateId":"A-%d","aggregateVersion":1,"eventId":"e-%d","event":{}}`, key, i, i)
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(v)}).FirstErr(); err != nil {
				t.Errorf("produce: %v", err)
				return
			}
			keysMu.Lock()
			keys = append(keys, key)
			keysMu.Unlock()
			select {
			case <-pctx.Done():
			case <-time.After(80 * time.Millisecond):
			}
		}
	}()

	w1 := start("w1", t.TempDir())
	testkit.Await(t, time.Minute, "w1 to own both partitions", func() bool { return assigned(w1) == 2 })
	open := func() int {
		n := 0
		for _, k := range rc.Keys() {
			n += k.Open
		}
		return n
	}
	dir2 := t.TempDir()
	lives := 3
	if testing.Short() {
		lives = 2
	}
	// Each life of w2 moves one partition from w1 and back: a revoke of
	// w1 (w1's move back is a clean stop of w2, whose calls end first). It
	// landed during a call when an in-flight entry was recovered meanwhile.
	caught := 0
	for life := range lives {
		// w1 in its stride (some 15 calls open at 12 intents a second),
		// so that the revoke, a moment after w2 joins, finds calls running.
		testkit.Await(t, time.Minute, "w1's calls in flight", func() bool { return open() >= 8 })
		before := recovered.Load()
		w2 := start("w2", dir2)
		// Ready, not just assigned: the revoke must find w2's Runner
		// started (it starts at verification).
		testkit.Await(t, time.Minute, "w2 to take a partition", func() bool { return assigned(w2) > 0 && w2.w.Stats().Ready() })
		// Quick lives give the partition back to w1 while the call it
		// had running when it lost it is still going; slow ones let w2
		// retry the keys w1 left unknown.
		if life%2 == 1 {
			// sleep ok: paces the life (w2 keeps the partition past the deadline of w1's unknown calls, so it may retry them); nothing is asserted on it.
			time.Sleep(timeout + sideeffects.DeadlineMargin + 500*time.Millisecond)
		}
		stop(w2)
		testkit.Await(t, time.Minute, "w1 to own both partitions again", func() bool { return assigned(w1) == 2 })
		if recovered.Load() > before {
			caught++
		}
		time.Sleep(300 * time.Millisecond) // sleep ok: paces the lives; the test then waits for conditions
	}
	stopProducing()
	<-produced

	keysMu.Lock()
	want := append([]string(nil), keys...)
	keysMu.Unlock()
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	var ledger []effect.Entry
	testkit.Await(t, time.Minute, "every key to settle", func() bool {
		if ledger, err = ops.ReadLedger(ctx, opts, "fx", topic); err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, e := range ledger {
			if e.Status.Terminal() {
				n++
			}
		}
		return n == len(want)
	})
	stop(w1)

	byKey := make(map[string]effect.Entry, len(ledger))
	for _, e := range ledger {
		byKey[e.Key] = e
	}
	seen := rc.Keys()
	requests, replays := 0, 0
	for _, key := range want {
		e, k := byKey[key], seen[key]
		requests += k.Requests
		replays += k.Replays
		if k.MaxOpen > 1 || k.Conflicts > 0 {
			t.Errorf("key %s: the receiver had %d requests open at once (%d answered 409)", key, k.MaxOpen, k.Conflicts)
		}
		if e.Status != effect.Succeeded {
			t.Errorf("key %s: %v after %d attempts; history %+v", key, e.Status, e.Attempts, e.History)
		}
		if k.Created != 1 {
			t.Errorf("key %s: %d applying answers (201), want 1", key, k.Created)
		}
		// Exactly one 2xx: a call the revoked owner could not record is
		// recorded from its report (or handed over in-process), not
		// made again and answered with a replay.
		if k.Created+k.Replays != 1 {
			t.Errorf("key %s: %d 2xx answers (%d replays), want exactly 1", key, k.Created+k.Replays, k.Replays)
		}
		for path, n := range k.ByPath {
			if n > 1 {
				t.Errorf("key %s: instance %s called it %d times", key, path, n)
			}
		}
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d keys were recorded failed", n)
	}
	settled := logs.count("recorded the outcome of a call made before")
	reported := logs.count("side effect outcome recorded from the previous owner")
	t.Logf("%d keys, %d requests, %d replays; %d revokes of w1, %d of them during calls (%d calls caught, %d outcomes handed over in w1, %d recorded from a report)",
		len(want), requests, replays, lives, caught, recovered.Load(), settled, reported)
	if caught == 0 {
		t.Fatal("no revoke landed while a call was in flight: the test proved nothing")
	}
}
