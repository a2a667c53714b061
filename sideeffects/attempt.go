package sideeffects

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/projector-dev/projector/internal/runtime/config"
)

// runnable reports whether the Runner should execute e, and from when.
func (r *Runner) runnable(e Entry) (time.Time, bool) {
	eff, ok := r.cfg.Effects[e.Effect]
	if !ok {
		return time.Time{}, false
	}
	switch e.Status {
	case Pending:
		return e.NextAttempt, true
	case Unknown:
		// Parked, or out of attempts: an unknown outcome is never retried
		// without a policy that says the receiver honours the key.
		if eff.OnUnknown == config.OnUnknownRetry && e.Attempts < eff.MaxAttempts {
			// The unknown attempt may still be running, made by another
			// instance or an earlier Runner (Recover cannot tell a call
			// that stopped from one that goes on): not before it is over.
			due := e.NextAttempt
			if n := len(e.History); n > 0 {
				if d := e.History[n-1].Start.Add(eff.Timeout + DeadlineMargin); d.After(due) {
					due = d
				}
			}
			return due, true
		}
	}
	return time.Time{}, false
}

// process runs one attempt of key, if the ledger says it is due.
func (r *Runner) process(ctx context.Context, key string) error {
	// One call per key in this process: a slot still held is the call of
	// an earlier Runner of this partition, revoked and given back to us.
	slot, err := r.cfg.Calls.Acquire(ctx, key)
	if err != nil {
		return nil // shutting down: the key stays for the next Runner
	}
	defer slot.Release()
	if o, ok := slot.Take(r.cfg.Scope); ok {
		settled, err := r.settle(key, o)
		if err != nil {
			slot.HandOver(o) // still unrecorded: keep it for the next Runner
			return err
		}
		if settled {
			return nil
		}
	}

	var (
		e     Entry
		start bool
		later time.Time
	)
	err = r.cfg.Store.Update(func(l *Ledger) error {
		start, later = false, time.Time{}
		cur, ok, err := l.Get(key)
		if err != nil || !ok {
			return err
		}
		due, ok := r.runnable(cur)
		if !ok {
			return nil
		}
		now := r.cfg.Now()
		if due.After(now) {
			later = due
			return nil
		}
		e, err = l.Start(key, now)
		start = err == nil
		return err
	})
	if err != nil {
		return fmt.Errorf("sideeffects: start %q: %w", key, err)
	}
	if !later.IsZero() {
		r.schedule(key, later)
	}
	if !start {
		return nil
	}
	// The in-flight mark is committed: from here on a crash means unknown.
	r.changed(e)
	eff := r.cfg.Effects[e.Effect]
	in, perr := ParseIntent(e.Intent)
	if perr != nil {
		in = Intent{Key: e.Key, Effect: e.Effect, Value: e.Intent}
	}
	// Not cancelled with ctx: a shutdown or a revoke lets the call finish
	// rather than manufacture an unknown outcome. It is bounded by the
	// attempt's deadline, which is what a Runner elsewhere waits for before
	// it retries an unknown outcome of this attempt.
	deadline := e.History[len(e.History)-1].Start.Add(eff.Timeout)
	callCtx, cancelCall := context.WithTimeout(context.WithoutCancel(ctx), deadline.Sub(r.cfg.Now()))
	res := eff.Executor.Execute(callCtx, in, e.Intent)
	cancelCall()

	// One decision (its backoff is random): recorded here, or reported to
	// the partition's next owner if the record fails.
	a, to, next := r.outcome(eff, e.Attempts, res)
	var done Entry
	err = r.cfg.Store.Update(func(l *Ledger) (err error) {
		done, err = l.finish(key, "record "+to.String(), a, to, next)
		return err
	})
	if err != nil {
		// The partition was revoked while the call ran, or the store
		// failed. The outcome is real: if this process gets the partition
		// back, its next Runner records it rather than calling again.
		slot.HandOver(Orphan{Scope: r.cfg.Scope, N: e.Attempts, Result: res})
		if r.cfg.Report != nil {
			r.cfg.Report(key, e.Attempts, a, to, next)
		}
		return fmt.Errorf("sideeffects: record %q: %w", key, err)
	}
	r.changed(done)
	if due, ok := r.runnable(done); ok {
		r.schedule(key, due)
	}
	return nil
}

// settle records the outcome an earlier Runner handed over, if the ledger
// still waits for it (the entry is in-flight or unknown at the orphan's
// attempt), and reports whether it did. A stale orphan is dropped.
func (r *Runner) settle(key string, o Orphan) (bool, error) {
	var (
		done  Entry
		stale error
	)
	err := r.cfg.Store.Update(func(l *Ledger) error {
		stale = nil
		cur, ok, err := l.Get(key)
		if err != nil || !ok {
			stale = ErrNotFound
			return err
		}
		eff, ok := r.cfg.Effects[cur.Effect]
		if !ok {
			stale = fmt.Errorf("sideeffects: effect %q is not this Runner's", cur.Effect)
			return nil
		}
		a, to, next := r.outcome(eff, o.N, o.Result)
		done, err = l.Settle(key, o.N, a, to, next)
		if errors.Is(err, ErrIllegalTransition) {
			stale, err = err, nil
		}
		return err
	})
	if err != nil {
		return false, fmt.Errorf("sideeffects: settle %q: %w", key, err)
	}
	if stale != nil {
		r.cfg.Logger.Info("dropped the outcome of an earlier call: the ledger has moved on", "key", key, "attempt", o.N, "reason", stale)
		return false, nil
	}
	r.cfg.Logger.Info("recorded the outcome of a call made before the partition was reassigned",
		"key", key, "attempt", o.N, "outcome", o.Result.Outcome, "status", done.Status)
	r.changed(done)
	if due, ok := r.runnable(done); ok {
		r.schedule(key, due)
	}
	return true, nil
}

// outcome is the ledger's record of attempt n's result: the attempt, the
// status it moves the entry to and, for a retry, when.
func (r *Runner) outcome(eff Effect, n int, res Result) (a Attempt, to Status, next time.Time) {
	a = Attempt{Duration: res.Duration, Outcome: res.Outcome, StatusCode: res.StatusCode, Ref: res.Ref}
	if res.Err != nil {
		a.Error = res.Err.Error()
	}
	now := r.cfg.Now()
	switch res.Outcome {
	case OutcomeSucceeded:
		return a, Succeeded, time.Time{}
	case OutcomeFailed:
		return a, Failed, time.Time{}
	case OutcomeRetryable:
		if n >= eff.MaxAttempts {
			a.Error = fmt.Sprintf("%s; giving up after %d attempts", a.Error, n)
			return a, Failed, time.Time{}
		}
		return a, Pending, now.Add(r.cfg.Backoff(n))
	default: // OutcomeUnknown, or an executor that could not tell
		a.Outcome = OutcomeUnknown
		if eff.OnUnknown == config.OnUnknownRetry {
			next = now.Add(r.cfg.Backoff(n))
		}
		return a, Unknown, next
	}
}
