package sideeffects

import (
	"errors"
	"fmt"
	"time"

	"github.com/projector-dev/projector/sideeffects/effect"
)

// DefaultStartAllowance is the default RunnerConfig.StartAllowance: the
// time the commit of an attempt's in-flight mark may take before its call
// still gets its whole timeout. The commit is the rest of the executor's
// Kafka transaction after the mark was staged (the transaction's other
// records, EndTxn) and the synced Pebble write: tens of milliseconds on a
// healthy broker, seconds when the broker is electing a leader or the disk
// stalls. Five seconds leaves that room; it is also what the allowance
// costs, since a retry of an unknown outcome (after a crash mid-call) waits
// for the attempt's recorded deadline: start + 5 s + the timeout + 1 s
// instead of start + the timeout + 1 s. A commit slower than the allowance
// costs no attempt: the call is not made, the attempt is withdrawn, and the
// key's next attempt gets twice the allowance (decision 011).
const DefaultStartAllowance = 5 * time.Second

// maxAllowanceDoublings bounds how often a key's start allowance doubles
// after withdrawals in a row: 16 times the default is 80 s, longer than a
// Kafka transaction can take under the default transactionTimeout (40 s,
// the broker aborts one older) plus the loop's 10 s to end it, so a
// commit the broker accepted fits in the end.
const maxAllowanceDoublings = 4

// allowance is key's start allowance: StartAllowance, doubled for each
// attempt of key withdrawn in a row, so that commits slower than the
// allowance cannot keep a key from ever being called.
func (r *Runner) allowance(key string) time.Duration {
	r.mu.Lock()
	n := r.withdrawn[key]
	r.mu.Unlock()
	return r.cfg.StartAllowance << min(n, maxAllowanceDoublings)
}

// called forgets key's withdrawals: its call was made.
func (r *Runner) called(key string) {
	r.mu.Lock()
	delete(r.withdrawn, key)
	r.mu.Unlock()
}

// withdraw takes back attempt e, whose call never left (too little of its
// time was left once its in-flight mark was committed, or its Caller sent
// nothing: why), and schedules the key again after a backoff, with a longer
// start allowance: the attempt is not counted, and no receiver saw it. If
// the withdrawal cannot be recorded (the partition was revoked), it is
// handed over in this process and reported to the partition's next owner
// like an outcome, so that the attempt is withdrawn there too, rather than
// waited for and retried (or parked) as an unknown outcome.
func (r *Runner) withdraw(slot *callSlot, e effect.Entry, why string) error {
	a := e.History[len(e.History)-1]
	r.mu.Lock()
	r.withdrawn[e.Key]++
	n := r.withdrawn[e.Key]
	r.mu.Unlock()
	now := r.cfg.Now()
	next := now.Add(r.cfg.Backoff(n))
	var done effect.Entry
	err := r.cfg.Store.Update(func(l *effect.Ledger) (err error) {
		done, err = l.Withdraw(e.Key, a.N, a.Start, next, r.cfg.Now())
		return err
	})
	if err != nil {
		slot.HandOver(orphan{Scope: r.cfg.Scope, N: a.N, Start: a.Start, Withdrawn: true})
		if r.cfg.ReportWithdrawal != nil {
			r.cfg.ReportWithdrawal(e.Key, a.N, a.Start, next)
		}
		if errors.Is(err, effect.ErrIllegalTransition) {
			// The ledger has moved on (as in record): reported, and the
			// Runner goes on.
			r.cfg.Logger.Warn("an attempt was not withdrawn: the ledger has moved on; reported", "key", e.Key, "attempt", a.N, "err", err)
			return nil
		}
		return fmt.Errorf("sideeffects: withdraw %q: %w", e.Key, err)
	}
	r.cfg.Logger.Warn("side effect attempt withdrawn: not called, not counted", "key", e.Key, "attempt", a.N,
		"why", why, "retryIn", next.Sub(now).Round(time.Millisecond), "withdrawnInARow", n)
	r.changed(done)
	r.schedule(e.Key, next)
	return nil
}
