package eos

import (
	"context"
	"errors"
	"fmt"

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

// fatalError wraps a fatal client error: ErrFenced when it is a fencing,
// else with what failed (an authorization error is not a fencing).
func fatalError(what string, err error) error {
	if isFenced(err) {
		return fmt.Errorf("%w: %v", ErrFenced, err)
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
