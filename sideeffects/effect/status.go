package effect

import (
	"fmt"
	"time"
)

// Status is a ledger entry's state.
//
//	pending ──Start──▶ in-flight ──Succeed──▶ succeeded          (terminal)
//	   ▲                  │ │ └───Fail─────▶ failed             (terminal)
//	   └──────Retry───────┘ └─MarkUnknown/Recover─▶ unknown
//	unknown ──Start (onUnknown: retry, same key)──▶ in-flight
//	unknown ──Resolve(succeeded|failed, note)──▶ succeeded | failed (Resolution set)
//	in-flight | unknown ──Settle(n)──▶ as Succeed/Fail/Retry/MarkUnknown, for
//	                                   the handed-over outcome of last attempt n
//	in-flight | unknown ──Withdraw(n)──▶ pending, attempt n removed and not
//	                                   counted: its call never left
type Status uint8

// The statuses. The zero Status is invalid.
const (
	Pending Status = iota + 1
	InFlight
	Succeeded
	Failed
	Unknown
)

var statusNames = [...]string{Pending: "pending", InFlight: "in-flight", Succeeded: "succeeded", Failed: "failed", Unknown: "unknown"}

func (s Status) String() string {
	if int(s) < len(statusNames) && s != 0 {
		return statusNames[s]
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Terminal reports whether no transition leaves s.
func (s Status) Terminal() bool { return s == Succeeded || s == Failed }

// ParseStatus parses a status name as printed by String.
func ParseStatus(name string) (Status, error) {
	for s, n := range statusNames {
		if n != "" && n == name {
			return Status(s), nil
		}
	}
	return 0, fmt.Errorf("sideeffects: unknown status %q (pending, in-flight, succeeded, failed, unknown)", name)
}

// MarshalText makes statuses readable in JSON and in the CLI.
func (s Status) MarshalText() ([]byte, error) {
	if s == 0 || int(s) >= len(statusNames) {
		return nil, fmt.Errorf("sideeffects: invalid status %d", uint8(s))
	}
	return []byte(s.String()), nil
}

// UnmarshalText is the inverse of MarshalText.
func (s *Status) UnmarshalText(b []byte) error {
	v, err := ParseStatus(string(b))
	*s = v
	return err
}

// Attempt is one call of an effect, or one that may have happened.
type Attempt struct {
	N     int       `json:"n"` // 1-based
	Start time.Time `json:"start"`
	// Deadline is when the attempt's call is cancelled at the latest, as
	// the Runner that started it decided (StartUntil): whoever retries an
	// unknown outcome of it waits for it. Zero in entries written before
	// it was recorded.
	Deadline time.Time `json:"deadline,omitzero"`
	// Duration is zero while the attempt is in flight.
	Duration   time.Duration `json:"duration,omitempty"`
	Outcome    Outcome       `json:"outcome,omitempty"` // zero while in flight
	StatusCode int           `json:"statusCode,omitempty"`
	Error      string        `json:"error,omitempty"`
	Ref        string        `json:"ref,omitempty"`
}

// Resolution records an operator's decision on an unknown outcome.
type Resolution struct {
	Outcome Status    `json:"outcome"` // Succeeded or Failed
	Note    string    `json:"note,omitempty"`
	At      time.Time `json:"at"`
}

// Outcome is how a call of an effect ended, as its caller classifies it
// (sideeffects.Caller; the webhook's classification is in package webhook).
type Outcome uint8

// The outcomes. The zero Outcome means "not finished".
const (
	// OutcomeSucceeded: the receiver confirmed the effect (2xx).
	OutcomeSucceeded Outcome = iota + 1
	// OutcomeRetryable: the effect did not happen and may succeed later
	// (408, 425, 429, 5xx, or a connection error before the request was
	// fully written).
	OutcomeRetryable
	// OutcomeFailed: the receiver refused the effect for good (other 4xx,
	// 3xx, an unusable URL).
	OutcomeFailed
	// OutcomeUnknown: the request was written, then no answer came (timeout,
	// connection lost). The effect may or may not have happened.
	OutcomeUnknown
)

var outcomeNames = [...]string{OutcomeSucceeded: "succeeded", OutcomeRetryable: "retryable", OutcomeFailed: "failed", OutcomeUnknown: "unknown"}

func (o Outcome) String() string {
	if o != 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// MarshalText makes outcomes readable in the ledger's JSON. An unnamed
// outcome is refused, as UnmarshalText would refuse it: an entry that
// could not be read back must not be written.
func (o Outcome) MarshalText() ([]byte, error) {
	if o == 0 || int(o) >= len(outcomeNames) {
		return nil, fmt.Errorf("sideeffects: invalid outcome %d", uint8(o))
	}
	return []byte(o.String()), nil
}

// UnmarshalText is the inverse of MarshalText.
func (o *Outcome) UnmarshalText(b []byte) error {
	for i, n := range outcomeNames {
		if n != "" && n == string(b) {
			*o = Outcome(i)
			return nil
		}
	}
	return fmt.Errorf("sideeffects: unknown outcome %q", b)
}

// Result is what one call of an effect found out (sideeffects.Caller).
type Result struct {
	Outcome    Outcome
	StatusCode int    // 0 when no response was received
	Ref        string // external reference of a success, if the receiver gave one
	Err        error  // the transport error or a description of a refusal
	Duration   time.Duration
	// NotSent says that the request never left: the caller gave up before
	// it handed anything to the network (its context was done when the call
	// began). Such a call is no attempt: the Runner withdraws it
	// (Ledger.Withdraw) instead of recording an outcome.
	NotSent bool
}
