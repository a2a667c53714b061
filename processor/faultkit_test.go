package processor_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/core/seam"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/harness/soak"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/testsize"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/projection"
)

// The fault-matrix kit: a start variant with its own state options and
// config tweaks, a supervisor that restarts crashed instances, and the
// figure line with the Jepsen-style checkers of internal/harness/soak (projection vs
// model, dead letters, aborted records visible read_committed).

// startWith is start with state options (an errorfs) and a config tweak.
func (e *env) startWith(o instOpts, so state.Options, tweak func(*processor.Config, *state.Store)) (*instance, error) {
	e.t.Helper()
	if o.id == "" {
		o.id = "w1"
	}
	if o.stateDir == "" {
		o.stateDir = filepath.Join(e.dir, o.id)
	}
	if so.CacheBytes == 0 {
		so.CacheBytes = 16 << 20
	}
	st, err := state.Open(o.stateDir, so)
	if err != nil {
		return nil, err
	}
	lvl := slog.LevelWarn
	if os.Getenv("PROJECTOR_TEST_LOG") != "" {
		lvl = slog.LevelDebug
	}
	cfg := processor.Config{
		Session: processor.Session{
			Name: group, InstanceID: o.id, Brokers: e.brokers, DeadLetterTopic: dlqTopic,
			MaxRecordsPerTxn: o.maxRecs, SessionTimeout: 6 * time.Second,
			TransactionTimeout: 20 * time.Second,
			Logger:             slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("instance", o.id),
		},
		Inputs: []string{inputTopic}, EffectsTopic: "case-events.effects",
		Projections: []*projection.Projection{{Name: "case-overview", Topic: projTopic, Handler: rules(), Versioned: true}},
		Dedup:       dedup.NewStore(168 * time.Hour),
		GapPolicy:   o.policy, HoldTimeout: o.hold,
	}
	seam.Processor(&cfg, seam.Seams{Store: st, Now: o.now, Hooks: o.hooks})
	if tweak != nil {
		tweak(&cfg, st)
	}
	p, err := processor.New(cfg)
	if err != nil {
		st.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{p: p, store: st, cancel: cancel, done: make(chan error, 1)}
	go func() { in.done <- p.Run(ctx) }()
	return in, nil
}

// supervise keeps one instance running until the group caught up with the
// input, restarting it (same id and state dir, like systemd would) when Run
// returns an error; each restart calls next(i) for the options of life i.
// It returns the lives that ended in an error.
func (e *env) supervise(within time.Duration, ready func() bool, next func(life int) *instance) (errs []error) {
	e.t.Helper()
	deadline := time.Now().Add(within)
	life := 0
	in := next(life)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		err := testkit.WaitCaughtUp(ctx, e.brokers, group, inputTopic)
		cancel()
		if err == nil && (ready == nil || ready()) {
			select {
			case err := <-in.done: // it may have died right at the end
				in.closeAfter(err)
				if err != nil {
					errs = append(errs, err)
				}
				return errs
			default:
			}
			if err := in.stop(e.t); err != nil {
				errs = append(errs, err)
			}
			return errs
		}
		select {
		case err := <-in.done:
			in.closeAfter(err)
			if err == nil {
				e.t.Fatalf("life %d: Run returned nil before the input was consumed", life)
			}
			e.t.Logf("life %d ended: %v", life, err)
			errs = append(errs, err)
			life++
			in = next(life)
		default:
		}
		if time.Now().After(deadline) {
			in.stop(e.t)
			e.t.Fatalf("not caught up within %s (%d lives)", within, life+1)
		}
	}
}

// checkFigure runs every checker on the outputs, logs the figure line and
// fails the test on any non-zero column. It returns the figure.
func (e *env) checkFigure(exp workload.Expect, n, crashes, faults int, seed uint64) soak.Figure {
	e.t.Helper()
	return e.checkFigureDL(exp, n, crashes, faults, seed, true)
}

// checkFigureDL is checkFigure; checkDL false leaves the dead letters to
// the caller (which checked them by key).
func (e *env) checkFigureDL(exp workload.Expect, n, crashes, faults int, seed uint64, checkDL bool) soak.Figure {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := soak.Check(ctx, e.brokers, projTopic, dlqTopic, exp, processor.ChangelogTopic(group, inputTopic))
	if err != nil {
		e.t.Fatal(err)
	}
	if !checkDL {
		c.DeadLetterProblem = nil
	}
	f := soak.Figure{Events: n, Dupes: exp.Duplicates, Crashes: crashes, Faults: faults, Seed: seed}
	c.Apply(&f)
	e.t.Logf("figure: %s", f)
	if !f.OK() || !c.OK() {
		e.t.Errorf("checkers failed: %s", c)
	}
	return f
}

// genWorkload is smallWorkload with options.
func genWorkload(seed uint64, events, aggs int, tweak func(*workload.Options)) ([]workload.Record, workload.Expect) {
	if testsize.Small() {
		events, aggs = events/5, max(aggs/5, 1)
	}
	o := workload.Defaults()
	o.Seed, o.Events, o.Aggregates = seed, events, aggs
	if tweak != nil {
		tweak(&o)
	}
	return workload.Generate(o)
}

// lean halves n at the tests' small size (the default: testsize), on top
// of the fifth that genWorkload and smallWorkload take there. It is for the
// tests whose fifth-size workload still cost several CPU-seconds under
// -race while their assertions need far less of it: they run at a tenth of
// their full size. Where a test's crash, fault or progress
// points count transactions, its per-transaction record limit is halved
// with it (lean(maxRecs)), so that the workload spans as many
// transactions as it did at a fifth and every fault still lands while
// records are flowing (a fault that did not land fails the test: each
// counts its crashes, injected errors or progress).
func lean(n int) int {
	if testsize.Small() {
		return n / 2
	}
	return n
}

func isCrash(err error) bool { return errors.Is(err, errCrash) }
