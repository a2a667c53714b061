// Package projection is the API of a projection's code: the Handler a
// library user implements (or the declarative Rules, whose merge is
// MergePatch), the Event it is given, the Result it returns with the side
// effects it asks for (Intent), and the Projection that names a read model.
// It also names the gap policies (Policy) a processor is configured with.
//
// What the processor does around a handler lives inward, in
// internal/engine/guard: the per-aggregate version guard (apply, stale,
// hold), the durable buffer of held events and its drain, and the stored
// form of all that. What a handler can rely on (docs/design.md#invariants):
//
//   - one-order-per-aggregate: for a versioned projection a handler sees an
//     aggregate's versions exactly in the order 1, 2, 3 …, each once; an
//     event whose version is not the next one is dropped as stale or held
//     until the missing ones are applied.
//   - a handler error leaves the aggregate where it was: the event is
//     dead-lettered (reason handler-error) and later versions wait behind
//     the gap.
//   - the processor calls Apply for one aggregate at a time, but for
//     several aggregates (one per input partition being processed) at once.
package projection

import "slices"

// Event is a decoded, validated event envelope (docs/contract.md#event-envelope),
// as a handler sees it. The processor has checked the envelope before the
// handler sees it: EventID, EventType and AggregateID are set, strings are
// valid UTF-8, and Payload is valid JSON.
//
// The handler must not modify an Event or keep it (or its Payload) after
// Apply returns: it shares memory with the input record.
type Event struct {
	// EventID identifies the event (dedup is by it); EventType selects the
	// rule of a declarative projection; AggregateID names the aggregate
	// whose state the event changes; AggregateType is "" when absent.
	EventID, EventType, AggregateID, AggregateType string
	// AggregateVersion is the aggregate's version after this event, 1 for
	// its first; 0 when the envelope has none (which only an unversioned
	// projection accepts).
	AggregateVersion int64
	// TenantID is "" when absent (an empty tenantId is treated as absent).
	TenantID string
	// OccurredAt is as given, an RFC 3339 timestamp, or "" when absent.
	OccurredAt string
	// CorrelationID, CausationID and Producer are "" when absent.
	CorrelationID, CausationID, Producer string
	// Payload is the raw JSON of the payload member exactly as in the input
	// (without surrounding whitespace); nil when absent, "null" when null.
	Payload []byte
}

// Handler computes an aggregate's next state from an applied event. state is
// the current JSON object ("{}" for a new or deleted aggregate) and must not be
// modified. Library users implement Handler to write projections in code; the
// declarative Rules are one implementation. The processor calls Apply from
// several goroutines at once (one per input partition being processed), never
// concurrently for one aggregate: an implementation must be safe for that.
type Handler interface {
	Apply(state []byte, ev *Event) (Result, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(state []byte, ev *Event) (Result, error)

// Apply calls f.
func (f HandlerFunc) Apply(state []byte, ev *Event) (Result, error) { return f(state, ev) }

// Result is what a handler decided for one event.
type Result struct {
	// State is the new JSON object. Ignored when Delete is set.
	State []byte
	// Delete removes the aggregate's state: the projection emits a tombstone
	// and the guard keeps its version.
	Delete bool
	// Keep leaves the state exactly as it was (a deleted aggregate stays
	// deleted); only the version advances. State is ignored.
	Keep bool
	// Effects are side-effect intents the event causes. They are produced
	// only in live mode and executed at most once per key by sideeffects.
	Effects []Intent
}

// Intent asks for one external side effect, identified by its idempotency key.
type Intent struct {
	Effect string
	Key    string
}

// Projection is one configured read model.
type Projection struct {
	Name    string
	Topic   string
	Handler Handler
	// Versioned enables the version guard. Without it events are applied in
	// arrival order after dedup and the emitted version counts applications.
	Versioned bool
	// AggregateTypes filters events; empty accepts every type.
	AggregateTypes []string
}

// Accepts reports whether events of the aggregate type feed this projection.
func (p *Projection) Accepts(aggregateType string) bool {
	return len(p.AggregateTypes) == 0 || slices.Contains(p.AggregateTypes, aggregateType)
}
