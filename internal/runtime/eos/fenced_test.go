package eos

import (
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestFatalErrorFencing: each of the broker's ways of saying that a newer
// incarnation took over stops the loop as ErrFenced, including the group's
// FENCED_INSTANCE_ID (static membership: the old incarnation's next join or
// heartbeat can see it before any transactional request sees the producer
// fencing); an authorization failure is fatal but not a fencing.
func TestFatalErrorFencing(t *testing.T) {
	for _, err := range []error{kerr.ProducerFenced, kerr.InvalidProducerEpoch, kerr.FencedInstanceID,
		fmt.Errorf("unable to join group session: %w", kerr.FencedInstanceID)} {
		if !isFatal(err) || !errors.Is(fatalError("fetch", err), ErrFenced) {
			t.Errorf("%v: fatal %v, as ErrFenced %v; want both", err, isFatal(err), errors.Is(fatalError("fetch", err), ErrFenced))
		}
	}
	for _, err := range []error{kerr.GroupAuthorizationFailed, kerr.TopicAuthorizationFailed, kerr.SaslAuthenticationFailed} {
		got := fatalError("fetch", err)
		if !isFatal(err) || errors.Is(got, ErrFenced) || !errors.Is(got, err) {
			t.Errorf("%v: fatal %v, error %v; want fatal, not fenced, wrapping the cause", err, isFatal(err), got)
		}
	}
}
