// Package sideeffectstest holds test doubles for the side-effect packages,
// in the style of net/http/httptest: in-memory stores (MemKV, MemStore), a
// webhook receiver that honours Idempotency-Key as real ones do
// (IdemReceiver), and Intent, which builds a parsed intent. Only tests
// import it; nothing in a deployed worker does.
//
// MemStore keeps staged-writes-only (docs/design.md#staged-writes-only) as
// the executor's store does: an Update's writes are applied whole when its
// function returns nil and dropped otherwise, so ledger tests see the same
// transactions a Kafka-backed store gives.
package sideeffectstest
