package sideeffects

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/projector-dev/projector/sideeffects/effect"
)

// runnable reports whether the Runner should execute e, and from when.
func (r *Runner) runnable(e effect.Entry) (time.Time, bool) {
	eff, ok := r.cfg.Effects[e.Effect]
	if !ok {
		return time.Time{}, false
	}
	switch e.Status {
	case effect.Pending:
		return e.NextAttempt, true
	case effect.Unknown:
		// Parked, or out of attempts: an unknown outcome is never retried
		// without a policy that says the receiver honours the key.
		if eff.OnUnknown == effect.OnUnknownRetry && e.Attempts < eff.MaxAttempts {
			// The unknown attempt may still be running, made by another
			// instance or an earlier Runner (Recover cannot tell a call
			// that stopped from one that goes on): not before it is over.
			due := e.NextAttempt
			if n := len(e.History); n > 0 {
				if d := r.callOver(eff, e.History[n-1]).Add(DeadlineMargin); d.After(due) {
					due = d
				}
			}
			return due, true
		}
	}
	return time.Time{}, false
}

// callOver is when attempt a's call has been cancelled at the latest: the
// later of the deadline its Runner recorded when it started it and the one
// this Runner's configuration gives (its start plus the start allowance
// plus the effect's timeout). The recorded one is what the call ran under,
// whatever the configuration is now (a rolling restart may have lowered the
// timeout); an attempt of an older version recorded none, and its call was
// cancelled at its start plus the timeout of its day.
func (r *Runner) callOver(eff Effect, a effect.Attempt) time.Time {
	d := a.Start.Add(r.cfg.StartAllowance + eff.Timeout)
	if a.Deadline.After(d) {
		d = a.Deadline
	}
	return d
}

// process runs one attempt of key, if the ledger says it is due.
func (r *Runner) process(ctx context.Context, key string) error {
	// One call per key in this process: a slot still held is the call of
	// an earlier Runner of this partition, revoked and given back to us.
	slot, err := r.cfg.calls.Acquire(ctx, key)
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
	e, ok, err := r.start(key)
	if err != nil || !ok {
		return err
	}
	// The in-flight mark is committed: from here on a crash means unknown.
	r.changed(e)
	eff := r.cfg.Effects[e.Effect]
	a := e.History[len(e.History)-1]
	// The call gets its whole timeout from now, and must be over by the
	// attempt's recorded deadline, which is what a Runner elsewhere waits
	// for before it retries an unknown outcome of this attempt. If the
	// commit left too little time for that, the call is not made.
	now := r.cfg.Now()
	if left := a.Deadline.Sub(now); left < eff.Timeout {
		return r.withdraw(slot, e, fmt.Sprintf("the in-flight mark took %s to commit (start allowance %s): %s of the attempt's time left, less than its timeout %s",
			now.Sub(a.Start).Round(time.Millisecond), a.Deadline.Sub(a.Start)-eff.Timeout, max(left, 0).Round(time.Millisecond), eff.Timeout))
	}
	res := r.call(ctx, eff, e)
	if res.NotSent {
		return r.withdraw(slot, e, fmt.Sprintf("the request was not sent: %v", res.Err))
	}
	r.called(key)
	return r.record(slot, key, eff, e.Attempts, res)
}

// start marks key in-flight if the ledger says it is due, recording the
// attempt's deadline (its start plus the key's start allowance plus the
// effect's timeout), and commits that; ok reports whether it did. A key not
// yet due is scheduled for when it is.
func (r *Runner) start(key string) (e effect.Entry, ok bool, err error) {
	var later time.Time
	err = r.cfg.Store.Update(func(l *effect.Ledger) error {
		ok, later = false, time.Time{}
		cur, found, err := l.Get(key)
		if err != nil || !found {
			return err
		}
		due, run := r.runnable(cur)
		if !run {
			return nil
		}
		now := r.cfg.Now()
		if due.After(now) {
			later = due
			return nil
		}
		e, err = l.StartUntil(key, now, now.Add(r.allowance(key)+r.cfg.Effects[cur.Effect].Timeout))
		ok = err == nil
		return err
	})
	if err != nil {
		return effect.Entry{}, false, fmt.Errorf("sideeffects: start %q: %w", key, err)
	}
	if !later.IsZero() {
		r.schedule(key, later)
	}
	return e, ok, nil
}

// call calls e's effect, for its whole timeout from now. Not cancelled
// with ctx: a shutdown or a revoke lets the call finish rather than
// manufacture an unknown outcome.
func (r *Runner) call(ctx context.Context, eff Effect, e effect.Entry) effect.Result {
	in, err := effect.ParseIntent(e.Intent)
	if err != nil {
		in = effect.Intent{Key: e.Key, Effect: e.Effect, Value: e.Intent}
	}
	in.TraceParent, in.TraceState = e.TraceParent, e.TraceState
	callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), eff.Timeout)
	defer cancel()
	if r.tracer != nil {
		return r.tracedCall(callCtx, eff, e, in)
	}
	return eff.Caller.Call(callCtx, in, e.Intent)
}

// record records the result of attempt n of key. If that fails (the
// partition was revoked while the call ran, or the store failed), the
// outcome is handed over in this process and reported to the partition's
// next owner.
func (r *Runner) record(slot *callSlot, key string, eff Effect, n int, res effect.Result) error {
	// One decision (its backoff is random): recorded here, or reported to
	// the partition's next owner if the record fails.
	a, to, next := r.outcome(eff, n, res)
	var done effect.Entry
	err := r.cfg.Store.Update(func(l *effect.Ledger) (err error) {
		done, err = l.Record(key, a, to, next)
		return err
	})
	if err != nil {
		// The outcome is real: if this process gets the partition back,
		// its next Runner records it rather than calling again.
		slot.HandOver(orphan{Scope: r.cfg.Scope, N: n, Result: res})
		if r.cfg.Report != nil {
			r.cfg.Report(key, n, a, to, next)
		}
		if errors.Is(err, effect.ErrIllegalTransition) {
			// The ledger has moved on while the call ran: the partition's
			// next owner recovered the attempt (seen here in a restore),
			// or a report on the effects topic settled it. The report
			// reaches whoever holds the attempt now; this Runner goes on,
			// since it re-reads every decision from the ledger – a record
			// cannot stop the partition's execution.
			r.cfg.Logger.Warn("the outcome of a call was not recorded: the ledger has moved on; reported", "key", key,
				"attempt", n, "outcome", res.Outcome, "err", err)
			return nil
		}
		return fmt.Errorf("sideeffects: record %q: %w", key, err)
	}
	r.changed(done)
	if due, ok := r.runnable(done); ok {
		r.schedule(key, due)
	}
	return nil
}

// settle records the outcome an earlier Runner handed over (or withdraws
// the attempt it handed over withdrawn), if the ledger still waits for it
// (the entry is in-flight or unknown at the orphan's attempt), and reports
// whether it did. A stale orphan is dropped.
func (r *Runner) settle(key string, o orphan) (bool, error) {
	var (
		done  effect.Entry
		stale error
	)
	err := r.cfg.Store.Update(func(l *effect.Ledger) error {
		stale = nil
		cur, ok, err := l.Get(key)
		if err != nil || !ok {
			stale = effect.ErrNotFound
			return err
		}
		eff, ok := r.cfg.Effects[cur.Effect]
		if !ok {
			stale = fmt.Errorf("sideeffects: effect %q is not this Runner's", cur.Effect)
			return nil
		}
		if o.Withdrawn {
			now := r.cfg.Now()
			done, err = l.Withdraw(key, o.N, o.Start, now, now)
		} else {
			a, to, next := r.outcome(eff, o.N, o.Result)
			done, err = l.Settle(key, o.N, a, to, next)
		}
		if errors.Is(err, effect.ErrIllegalTransition) {
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
	if o.Withdrawn {
		r.cfg.Logger.Info("withdrew an attempt whose call was never made, started before the partition was reassigned", "key", key, "attempt", o.N)
	} else {
		r.cfg.Logger.Info("recorded the outcome of a call made before the partition was reassigned",
			"key", key, "attempt", o.N, "outcome", o.Result.Outcome, "status", done.Status)
	}
	r.changed(done)
	if due, ok := r.runnable(done); ok {
		r.schedule(key, due)
	}
	return true, nil
}

// outcome is the ledger's record of attempt n's result: the attempt, the
// status it moves the entry to and, for a retry, when.
func (r *Runner) outcome(eff Effect, n int, res effect.Result) (a effect.Attempt, to effect.Status, next time.Time) {
	a = effect.Attempt{Duration: res.Duration, Outcome: res.Outcome, StatusCode: res.StatusCode, Ref: res.Ref}
	if res.Err != nil {
		a.Error = res.Err.Error()
	}
	now := r.cfg.Now()
	switch res.Outcome {
	case effect.OutcomeSucceeded:
		return a, effect.Succeeded, time.Time{}
	case effect.OutcomeFailed:
		return a, effect.Failed, time.Time{}
	case effect.OutcomeRetryable:
		if n >= eff.MaxAttempts {
			a.Error = fmt.Sprintf("%s; giving up after %d attempts", a.Error, n)
			return a, effect.Failed, time.Time{}
		}
		return a, effect.Pending, now.Add(r.cfg.Backoff(n))
	default: // OutcomeUnknown, or a Caller that could not tell
		a.Outcome = effect.OutcomeUnknown
		if eff.OnUnknown == effect.OnUnknownRetry {
			next = now.Add(r.cfg.Backoff(n))
		}
		return a, effect.Unknown, next
	}
}

// Backoff limits (backoff). The delay before retry n (n ≥ 1) is uniform in
// [0, min(BackoffCap, BackoffBase·2^(n-1))]: "full jitter", so that keys
// failing together against one receiver do not retry together.
const (
	BackoffBase = 200 * time.Millisecond
	BackoffCap  = 30 * time.Second
)

// backoff returns the delay before retry number attempt (1 = the first
// retry). rng nil uses the global source; a *rand.Rand is not safe for
// concurrent use, so callers sharing one must serialise.
func backoff(attempt int, rng *rand.Rand) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	ceil := BackoffCap
	if attempt <= 32 { // beyond, the shift would overflow; the cap applies anyway
		if d := BackoffBase << (attempt - 1); d > 0 && d < BackoffCap {
			ceil = d
		}
	}
	if rng == nil {
		return time.Duration(rand.Int64N(int64(ceil) + 1))
	}
	return time.Duration(rng.Int64N(int64(ceil) + 1))
}
