// Package projection turns applied events into read-model state: the
// per-aggregate version guard (apply / stale / hold), the durable buffer of held
// events and its drain, the declarative rules (merge, delete) and the Handler
// interface for projections written in Go.
//
// Invariants (named in docs/design.md#invariants):
//
//   - one-order-per-aggregate: for a versioned projection the versions
//     applied to an aggregate are exactly 1, 2, 3 …; an event whose version
//     is not the next one is stale (≤ current) or held (> current+1).
//   - one-order-per-aggregate (held events are state): they are stored below
//     the task prefix (and so produced to the changelog), survive crashes and
//     partition moves, and drain in order the moment the missing version is
//     applied. An aggregate's held events are the one its record carries
//     inline, if any, and those under its held prefix; its record's held
//     count counts both (decision 009).
//   - one-order-per-aggregate (a handler error leaves the guard where it
//     was): the failing event is reported (dead-lettered by the processor)
//     and later versions wait behind the gap, where the gap policy and
//     operators see them.
//   - staged-writes-only: the guard reads and writes only through the staged
//     transaction it is given, so nothing it does outlives an aborted Kafka
//     transaction.
package projection

import (
	"slices"

	"github.com/projector-dev/projector/internal/core/envelope"
)

// Event is a decoded, validated event envelope.
type Event = envelope.Event

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
