// Package guard is the processor's per-aggregate version guard: it applies
// a projection's events to aggregate state through a staged KV (Guard.Offer),
// decides apply / stale / hold, keeps held events as durable state and drains
// them the moment the missing version is applied, and resolves a gap that
// outlived its hold timeout by policy (Guard.Expire). It runs the
// projection's handler (projection.Handler) for each applied event.
//
// It sits between the handler API (package projection), which it imports,
// and the public library (package processor), which uses it; operator
// commands that read the changelog use only its read-only view (view.go:
// the key parsers, DecodeSnapshot, DecodeHeld, CheckRecord), never the
// guard itself.
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
//
// Its error texts keep the "projection" prefix (projection <name>: …,
// projection: corrupt aggregate record): they reach dead-letter records and
// operators' output, which moving the code must not change.
package guard
