package processor

import "fmt"

// Outcome is what became of one consumed record for one projection
// (docs/contract.md#outcomes): the label of projector_events_total and the
// key of Stats.Events. A typed constant, so that a misspelt outcome does
// not compile instead of counting zero.
type Outcome uint8

// The outcomes, in the contract's order, then OutcomeFailed (handler error
// or held limit: dead-lettered) and OutcomeFiltered (a new event no
// projection accepts; counted under projection ""). The zero Outcome is
// invalid.
const (
	OutcomeApplied Outcome = iota + 1
	OutcomeDuplicate
	OutcomeStale
	OutcomeHeld
	OutcomeConflict
	OutcomeInvalid
	OutcomeTooLarge
	OutcomeFailed
	OutcomeFiltered
)

var outcomeNames = [...]string{OutcomeApplied: "applied", OutcomeDuplicate: "duplicate", OutcomeStale: "stale",
	OutcomeHeld: "held", OutcomeConflict: "conflict", OutcomeInvalid: "invalid", OutcomeTooLarge: "too-large",
	OutcomeFailed: "failed", OutcomeFiltered: "filtered"}

// String is the outcome's label ("applied", "too-large", …).
func (o Outcome) String() string {
	if o != 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Outcomes lists every outcome, in the order of the constants.
var Outcomes = []Outcome{OutcomeApplied, OutcomeDuplicate, OutcomeStale, OutcomeHeld, OutcomeConflict,
	OutcomeInvalid, OutcomeTooLarge, OutcomeFailed, OutcomeFiltered}

// IntentStatus is what the processor did with a side-effect intent: the
// key of Stats.Effects (the executor's own statuses are
// sideeffects.WorkerStats').
type IntentStatus uint8

// The intent statuses. The zero IntentStatus is invalid.
const (
	// IntentEnqueued: produced to the effects topic (live mode).
	IntentEnqueued IntentStatus = iota + 1
	// IntentSuppressed: counted, not produced (rebuild mode).
	IntentSuppressed
)

// String is the status's label ("enqueued", "suppressed").
func (s IntentStatus) String() string {
	switch s {
	case IntentEnqueued:
		return "enqueued"
	case IntentSuppressed:
		return "suppressed"
	}
	return fmt.Sprintf("IntentStatus(%d)", uint8(s))
}

// IntentStatuses lists every intent status.
var IntentStatuses = []IntentStatus{IntentEnqueued, IntentSuppressed}
