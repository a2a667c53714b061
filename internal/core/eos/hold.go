package eos

import (
	"context"
	"errors"
	"time"
)

// HoldError is how a TaskHandler's Process says that a record cannot be
// processed now but may be later: something it needs is unavailable (the
// Schema Registry a framed value's schema comes from). Nothing about the
// record is decided: the loop aborts the transaction (the session rewinds
// to the committed offsets, so the records come again), is not ready with
// Reason, waits a backoff and tries again, until a transaction commits or
// Run's context ends. A record that might decode later is never
// dead-lettered (docs/design.md#nothing-dropped-silently).
type HoldError struct {
	Reason string // for /readyz and the log: what is unavailable
	Err    error
}

func (e *HoldError) Error() string { return "eos: holding: " + e.Reason + ": " + e.Err.Error() }
func (e *HoldError) Unwrap() error { return e.Err }

// Backoff bounds between attempts while holding: the first retry is soon (a
// blip), later ones back off to a bound a recovery is noticed within.
const (
	holdBackoffMin = 100 * time.Millisecond
	holdBackoffMax = 5 * time.Second
)

// holding is the loop's state while transactions abort on a HoldError.
type holding struct {
	reason  string
	since   time.Time
	backoff time.Duration
}

// hold records a transaction aborted on he, says so (one WARN line per
// episode, readiness with the reason), and waits the backoff. It returns
// false when ctx ended while waiting.
func (l *Loop[T]) hold(ctx context.Context, he *HoldError) bool {
	l.stats.addHold()
	if l.held == nil {
		l.held = &holding{since: time.Now(), backoff: holdBackoffMin}
		l.cfg.Logger.Warn("holding: records wait until the cause is gone, nothing is dead-lettered; retrying with backoff",
			"reason", he.Reason, "err", he.Err)
	} else {
		l.held.backoff = min(2*l.held.backoff, holdBackoffMax)
	}
	l.held.reason = he.Reason
	l.publishReadiness()
	t := time.NewTimer(l.held.backoff)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// unhold ends a hold episode once a transaction committed.
func (l *Loop[T]) unhold() {
	if l.held == nil {
		return
	}
	l.cfg.Logger.Info("no longer holding", "reason", l.held.reason, "held", time.Since(l.held.since).Round(time.Millisecond))
	l.held = nil
	l.publishReadiness()
}

// asHold reports whether err is a HoldError.
func asHold(err error) (*HoldError, bool) {
	var he *HoldError
	return he, errors.As(err, &he)
}
