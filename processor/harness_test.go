package processor_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/app/broker"
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/seam"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/projection"
)

const (
	inputTopic = "case-events"
	projTopic  = "case-overview.v1"
	dlqTopic   = "case-events.dlq"
	group      = "case-projector"
)

// env is one test's broker plus helpers to run processor instances on it.
// Nothing in it is shared between tests (broker, topics, state dirs), so
// any test may run in parallel (t.Parallel; go test's default -parallel,
// GOMAXPROCS, bounds how many at once), and the costly integration tests do.
// A test that times itself (the gap expiry's cost per gap and transaction
// length, the too-large drains, the standby tidy's due times, the claim)
// must not: the tests that do not call t.Parallel run first, one at a time.
type env struct {
	t       testing.TB
	brokers []string
	b       *broker.Embedded
	dir     string
}

func newEnv(t testing.TB, partitions int32) *env {
	t.Helper()
	b, brokers := testkit.Broker(t, partitions, inputTopic)
	return &env{t: t, brokers: brokers, b: b, dir: t.TempDir()}
}

func rules() projection.Rules {
	return projection.Rules{
		"CaseOpened": projection.Merge, "CaseUpdated": projection.Merge,
		"CaseEscalated": projection.Merge, "CaseClosed": projection.Delete,
	}
}

// instance is one running processor with its own state dir.
type instance struct {
	p      *processor.Processor
	store  *state.Store
	cancel context.CancelFunc
	done   chan error
}

type instOpts struct {
	id       string
	stateDir string
	hooks    *eos.Hooks
	maxRecs  int
	policy   projection.Policy
	hold     time.Duration
	now      func() time.Time
	// extra projections beside case-overview.
	extra []*projection.Projection
	// rules are the side-effect rules (none when nil).
	rules processor.EffectRules
	// clientOpts are extra franz-go options (Session.ClientOpts).
	clientOpts []kgo.Opt
}

func (e *env) start(o instOpts) *instance {
	e.t.Helper()
	if o.id == "" {
		o.id = "w1"
	}
	if o.stateDir == "" {
		o.stateDir = filepath.Join(e.dir, o.id)
	}
	st, err := state.Open(o.stateDir, state.Options{CacheBytes: 16 << 20})
	if err != nil {
		e.t.Fatal(err)
	}
	lvl := slog.LevelWarn
	if os.Getenv("PROJECTOR_TEST_LOG") != "" {
		lvl = slog.LevelDebug
	}
	cfg := processor.Config{
		Session: processor.Session{
			Name: group, InstanceID: o.id, Brokers: e.brokers, DeadLetterTopic: dlqTopic,
			MaxRecordsPerTxn: o.maxRecs, SessionTimeout: 6 * time.Second,
			TransactionTimeout: 20 * time.Second, ClientOpts: o.clientOpts,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("instance", o.id),
		},
		Inputs: []string{inputTopic}, EffectsTopic: "case-events.effects",
		Projections: append([]*projection.Projection{{Name: "case-overview", Topic: projTopic, Handler: rules(), Versioned: true}}, o.extra...),
		Dedup:       dedup.NewStore(168 * time.Hour),
		GapPolicy:   o.policy, HoldTimeout: o.hold, EffectRules: o.rules,
	}
	seam.Processor(&cfg, seam.Seams{Store: st, Now: o.now, Hooks: o.hooks})
	p, err := processor.New(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{p: p, store: st, cancel: cancel, done: make(chan error, 1)}
	go func() { in.done <- p.Run(ctx) }()
	return in
}

// stop cancels the instance, waits for Run and closes its store.
func (in *instance) stop(t testing.TB) error {
	in.cancel()
	var err error
	select {
	case err = <-in.done:
	case <-time.After(60 * time.Second):
		t.Fatal("processor did not stop within 60s")
	}
	in.store.Close()
	return err
}

// closeAfter closes the store of an instance whose Run returned err: after
// a crash hook as a crash leaves it (state.Store.Abandon: the store runs
// without a WAL, so the commits its memtables held are lost, as in a killed
// process), otherwise cleanly.
func (in *instance) closeAfter(err error) {
	if isCrash(err) {
		in.store.Abandon()
		return
	}
	in.store.Close()
}

// wait waits for Run to return on its own (a crash hook) and closes the store.
func (in *instance) wait(t testing.TB, within time.Duration) error {
	select {
	case err := <-in.done:
		in.closeAfter(err)
		return err
	case <-time.After(within):
		t.Fatalf("processor still running after %s", within)
		return nil
	}
}

func (e *env) produce(recs []workload.Record) {
	e.t.Helper()
	if err := testkit.Produce(context.Background(), e.brokers, inputTopic, recs); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) waitCaughtUp(within time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	if err := testkit.WaitCaughtUp(ctx, e.brokers, group, inputTopic); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) read(topic string) []*kgo.Record {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	recs, err := testkit.ReadAll(ctx, e.brokers, topic)
	if err != nil {
		e.t.Fatal(err)
	}
	return recs
}

// verify checks the committed outputs against the workload's expectation and
// logs the figure line.
func (e *env) verify(exp workload.Expect, figure string) testkit.Report {
	e.t.Helper()
	rep := testkit.CheckProjection(e.read(projTopic), exp.Final)
	dl := testkit.DeadLetters(e.read(dlqTopic))
	problems := testkit.CheckDeadLetters(dl, exp.DeadLetterValues)
	e.t.Logf("%s; %s; dead letters %d (want %d)", figure, rep, len(dl), len(exp.DeadLetterValues))
	if !rep.OK() {
		e.t.Errorf("projection check failed: %s", rep)
	}
	if len(problems) > 0 {
		e.t.Errorf("dead-letter check failed (%d problems): %s", len(problems), strings.Join(problems[:min(len(problems), 10)], "\n"))
	}
	return rep
}

var errCrash = errors.New("injected crash")

// once returns a hook that fails the n-th time it is called.
func once(n int) func() error {
	var mu sync.Mutex
	calls := 0
	return func() error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == n {
			return fmt.Errorf("%w at call %d", errCrash, n)
		}
		return nil
	}
}

func fmtFigure(n, dupes, crashes, aborts int) string {
	return fmt.Sprintf("%d events, %d dupes injected, %d crashes, %d aborts", n, dupes, crashes, aborts)
}

func hooksAfterCommit(n int) eos.Hooks { return eos.Hooks{AfterCommit: once(n)} }
func hooksAfterStage(n int) eos.Hooks  { return eos.Hooks{AfterStage: once(n)} }

func ptr[T any](v T) *T { return &v }
