package eos

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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

// TestFencedErrorNamesTheTwin: Run reports a fencing as a FencedError naming
// the instance id, group and transactional id. The group's
// FENCED_INSTANCE_ID, and a producer fencing soon after the start, say that
// another process is running with the instance id; a producer fencing long
// after the start says a newer incarnation took over, or such a process. All
// of them are ErrFenced and keep the broker's answer.
func TestFencedErrorNamesTheTwin(t *testing.T) {
	l := New(Config{Session: Session{InstanceID: "w-1"}, Group: "g", TransactionalID: "g-w-1"}, &restoreHandler{})
	const twin = "another process is running with instance id w-1 (group g, transactional id g-w-1) and fenced this one"
	for _, tc := range []struct {
		name    string
		err     error
		age     time.Duration
		want    string
		twin    bool
		wrapped error
	}{
		{"group", fatalError("fetch", fmt.Errorf("unable to join group session: %w", kerr.FencedInstanceID)), time.Hour, twin, true, kerr.FencedInstanceID},
		{"producer-soon", fatalError("end transaction", kerr.ProducerFenced), time.Minute, twin, true, kerr.ProducerFenced},
		{"producer-late", fatalError("produce", kerr.InvalidProducerEpoch), time.Hour,
			"fenced by another instance with the same transactional id (instance id w-1, group g, transactional id g-w-1): a newer incarnation of this instance took over, or another process is running with instance id w-1", false, kerr.InvalidProducerEpoch},
		{"unwrapped", fmt.Errorf("eos: begin transaction: %w", kerr.ProducerFenced), time.Second, twin, true, kerr.ProducerFenced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := l.fenced(tc.err, time.Now().Add(-tc.age))
			var fe *FencedError
			if !errors.As(got, &fe) || fe.Twin != tc.twin {
				t.Fatalf("%v: got %#v, want a FencedError with Twin %v", tc.err, got, tc.twin)
			}
			if !strings.Contains(got.Error(), tc.want) {
				t.Errorf("message %q lacks %q", got, tc.want)
			}
			if !errors.Is(got, ErrFenced) || !errors.Is(got, tc.wrapped) {
				t.Errorf("%v: ErrFenced %v, wraps %v %v", got, errors.Is(got, ErrFenced), tc.wrapped, errors.Is(got, tc.wrapped))
			}
			if strings.Count(got.Error(), ErrFenced.Error()) > 1 {
				t.Errorf("message repeats ErrFenced: %q", got)
			}
		})
	}
	for _, err := range []error{nil, kerr.GroupAuthorizationFailed, errors.New("eos: flush: boom")} {
		if got := l.fenced(err, time.Now()); got != err {
			t.Errorf("fenced(%v) = %v, want it unchanged", err, got)
		}
	}
}
