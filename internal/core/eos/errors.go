package eos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrFenced reports that another instance with the same transactional id took
// over; the process must stop (docs/design.md#fencing-is-fatal). The broker
// says so as the producer's fencing (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH)
// or, as the instance id is also the group's static member id (decision 006),
// as the group's (FENCED_INSTANCE_ID): whichever request of the old
// incarnation reaches the broker first after the new one started.
var ErrFenced = errors.New("fenced by another instance with the same transactional id")

// FencedError is how Run reports a fencing (errors.Is(err, ErrFenced)): which
// instance was fenced, and whether a live twin did it – a second process
// running with the same instance id, which the operator must stop or give
// its own id (docs/contract.md#exit-codes-and-signals). Restarted under a
// supervisor, two such processes fence each other in turn; the message says
// so rather than leave a bare fencing in the log.
type FencedError struct {
	InstanceID, Group, TransactionalID string
	// Twin: the fencer is a live process with this instance id. The group
	// says so (FENCED_INSTANCE_ID: another member joined with our
	// group.instance.id), or the producer was fenced within twinWindow of
	// the loop's start: a successor replaces an instance its supervisor gave
	// up on, rarely one that started moments ago, while a second process
	// started with the same id – or restarted after it fenced us – fences
	// at once.
	Twin bool
	Err  error // the broker's answer
}

// twinWindow is how soon after the loop's start a fenced producer counts as
// fenced by a twin: longer than the restart delays of supervisors that
// restart a failed worker (systemd's RestartSec in deploy/, Kubernetes'
// CrashLoopBackOff up to 5 minutes), so that two twins restarting each other
// say what they are.
const twinWindow = 5 * time.Minute

func (e *FencedError) Error() string {
	if e.Twin {
		return fmt.Sprintf("eos: another process is running with instance id %s (group %s, transactional id %s) and fenced this one; "+
			"give every running process its own kafka.instanceId (two with one id fence each other in turn): %v",
			e.InstanceID, e.Group, e.TransactionalID, e.Err)
	}
	return fmt.Sprintf("eos: %v (instance id %s, group %s, transactional id %s): a newer incarnation of this instance took over, "+
		"or another process is running with instance id %s: %v", ErrFenced, e.InstanceID, e.Group, e.TransactionalID, e.InstanceID, e.Err)
}

func (e *FencedError) Unwrap() []error { return []error{ErrFenced, e.Err} }

// fenced turns an error Run returns that is a fencing into a FencedError
// naming this instance; any other error is returned as it is.
func (l *Loop[T]) fenced(err error, started time.Time) error {
	if err == nil || !errors.Is(err, ErrFenced) && !isFenced(err) {
		return err
	}
	var fe *FencedError
	if errors.As(err, &fe) {
		return err
	}
	cause := err
	if u, ok := err.(interface{ Unwrap() []error }); ok {
		// fatalError's "%w: %w": keep the broker's answer, not ErrFenced.
		if errs := u.Unwrap(); len(errs) > 0 && errs[0] == ErrFenced {
			cause = errors.Join(errs[1:]...)
		}
	}
	return &FencedError{
		InstanceID: l.cfg.InstanceID, Group: l.cfg.Group, TransactionalID: l.cfg.TransactionalID,
		Twin: errors.Is(err, kerr.FencedInstanceID) || time.Since(started) < twinWindow,
		Err:  cause,
	}
}

// stopping turns an error caused by shutdown (a restore cut short, say) into
// a clean stop: no transaction is open at these points, so nothing is lost.
func (l *Loop[T]) stopping(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, errStateCommit) {
		l.cfg.Logger.Info("stopping", "interrupted", err)
		return nil
	}
	return err
}

// isFatal reports client errors after which the loop must not continue.
func isFatal(err error) bool {
	return isFenced(err) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed) || errors.Is(err, kerr.GroupAuthorizationFailed) ||
		errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.SaslAuthenticationFailed)
}

// isFenced reports the broker's ways of saying a newer incarnation took
// over (ErrFenced).
func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.FencedInstanceID)
}

// fatalError wraps a fatal client error: ErrFenced and the broker's answer
// when it is a fencing (Run makes it a FencedError), else with what failed
// (an authorization error is not a fencing).
func fatalError(what string, err error) error {
	if isFenced(err) {
		return fmt.Errorf("%w: %w", ErrFenced, err)
	}
	return fmt.Errorf("eos: %s: %w", what, err)
}

// fetchError logs the poll's fetch errors (the end of the poll's own wait
// aside) and returns the last fatal one, wrapped; the others are only
// logged.
func (l *Loop[T]) fetchError(fetches kgo.Fetches) error {
	var fatal error
	fetches.EachError(func(t string, part int32, err error) {
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return
		}
		l.cfg.Logger.Warn("fetch error", "topic", t, "partition", part, "err", err)
		if isFatal(err) {
			fatal = err
		}
	})
	if fatal != nil {
		return fatalError("fetch", fatal)
	}
	return nil
}
