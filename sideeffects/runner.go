package sideeffects

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/projector-dev/projector/sideeffects/effect"
)

// Runner drives ledger entries to an outcome: it starts due pending entries
// (and unknown ones under onUnknown: retry), at most Workers at a time,
// calls their effect (its Caller) and records the result, retrying with
// backoff.
//
// Order per attempt, which is what makes in-flight-before-call hold
// (docs/design.md#in-flight-before-call):
//
//  0. Hold the key's slot in the callRegistry, waiting while another Runner
//     of this process still has a call for it; if that Runner handed its outcome
//     over, record it (Ledger.Settle) and stop here.
//  1. Update: re-read the entry; if it is due, start it (→ in-flight), with
//     its deadline recorded: its start plus the start allowance (for this
//     commit) plus Effect.Timeout. Commit.
//  2. Only then call the effect, with its whole Timeout from now – which
//     ends by the recorded deadline. If less than that is left, or the
//     Caller sent nothing, withdraw the attempt instead (back to pending,
//     not counted; withdraw.go) and stop here.
//  3. Update: record the outcome (succeeded, failed, pending for a retry,
//     unknown). Commit. If that fails (the partition was revoked), hand the
//     outcome over through the callRegistry to the key's next Runner in this
//     process.
//  4. Free the slot.
//
// A crash between 1 and 3 leaves the entry in-flight; the next Run begins
// with Ledger.Recover, which turns it into unknown. An unknown entry is
// retried no sooner than its last attempt's deadline (the later of the
// recorded one and what the configuration gives now) plus DeadlineMargin, so
// that a call another instance may still be making has ended first; within
// one process, the callRegistry keeps Runners from overlapping whatever the
// clock says.
//
// Store errors are fatal to Run: without the store the Runner can neither
// guarantee in-flight-before-call nor record outcomes, and the restart's
// Recover puts things right. A Worker runs one Runner per owned
// effects-topic partition, while the partition is assigned.
type Runner struct {
	cfg  RunnerConfig
	wake chan struct{}

	mu        sync.Mutex
	sched     schedule
	active    map[string]bool // keys a worker holds
	again     map[string]bool // enqueued while active: look again when done
	withdrawn map[string]int  // keys whose last attempts were withdrawn, how many in a row
	started   bool
	// tracer makes the call spans; nil without RunnerConfig.TracerProvider.
	tracer trace.Tracer
}

// NewRunner validates cfg and returns a Runner.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.applyDefaults()
	r := &Runner{cfg: cfg, wake: make(chan struct{}, 1), active: make(map[string]bool), again: make(map[string]bool),
		withdrawn: make(map[string]int)}
	if cfg.TracerProvider != nil {
		r.tracer = cfg.TracerProvider.Tracer(tracerName)
	}
	return r, nil
}

// Enqueue asks the Runner to look at key now. It never blocks and is safe
// before Run. The processor calls it from the after-commit hook of the
// transaction in which Ledger.Offer created the key.
func (r *Runner) Enqueue(key string) { r.schedule(key, time.Time{}) }

// Offer parses an intents-topic value, offers it to the ledger in its own
// transaction and enqueues the key if it is new. The processor offers
// inside its consume transactions instead (and calls Enqueue); Offer serves
// tools and tests.
func (r *Runner) Offer(value []byte) (e effect.Entry, dup bool, err error) {
	in, err := effect.ParseIntent(value)
	if err != nil {
		return effect.Entry{}, false, err
	}
	err = r.cfg.Store.Update(func(l *effect.Ledger) error {
		e, dup, err = l.Offer(in, r.cfg.Now())
		return err
	})
	if err != nil {
		return effect.Entry{}, false, err
	}
	if !dup {
		r.Enqueue(in.Key)
	}
	return e, dup, nil
}

// Resolve settles an unknown key by hand (see Ledger.Resolve).
func (r *Runner) Resolve(key string, outcome effect.Status, note string) (effect.Entry, error) {
	var e effect.Entry
	err := r.cfg.Store.Update(func(l *effect.Ledger) (err error) {
		e, err = l.Resolve(key, outcome, note, r.cfg.Now())
		return err
	})
	if err == nil {
		r.changed(e)
	}
	return e, err
}

// Run recovers the ledger, then executes due entries until ctx is done. It
// returns nil after a cancellation, or the first store error. Calls in
// progress at cancellation are allowed to finish (each is bounded by its
// effect's timeout) and recorded, so that a clean shutdown creates no
// unknown outcomes. Run may be called once.
func (r *Runner) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return errors.New("sideeffects: Runner.Run called twice")
	}
	r.started = true
	r.mu.Unlock()

	// Recover before anything is executed, and commit it: an in-flight entry
	// from an earlier life must never be mistaken for one of ours.
	var recovered []effect.Entry
	if err := r.cfg.Store.Update(func(l *effect.Ledger) (err error) {
		recovered, err = l.Recover(r.cfg.Now())
		return err
	}); err != nil {
		return fmt.Errorf("sideeffects: recover: %w", err)
	}
	for _, e := range recovered {
		r.cfg.Logger.Warn("side effect outcome unknown after restart", "key", e.Key, "effect", e.Effect, "attempts", e.Attempts)
		r.changed(e)
	}
	if err := r.cfg.Store.View(func(l *effect.Ledger) error {
		return l.Scan(func(e effect.Entry) error {
			if due, ok := r.runnable(e); ok {
				r.schedule(e.Key, due)
			}
			return nil
		})
	}); err != nil {
		return fmt.Errorf("sideeffects: load ledger: %w", err)
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := make(chan string)
	var wg sync.WaitGroup
	for range r.cfg.Workers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case key := <-work:
					if ctx.Err() != nil { // shutting down: start nothing new
						r.release(key)
						return
					}
					if err := r.process(ctx, key); err != nil {
						cancel(err)
					}
					r.release(key)
				}
			}
		})
	}

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		key, wait := r.next()
		if key != "" {
			select {
			case work <- key:
				continue
			case <-ctx.Done():
				r.release(key)
			}
		}
		if ctx.Err() != nil {
			break
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
		case <-r.wake:
		case <-timer.C:
		}
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

func (r *Runner) changed(e effect.Entry) {
	if r.cfg.OnChange != nil {
		r.cfg.OnChange(e)
	}
}
