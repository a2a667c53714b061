// Package processor is projector's event pipeline, run on the exactly-once
// loop of internal/core/eos: for every input record, in partition order, it decodes
// the envelope, deduplicates it, offers it to each projection's version guard
// and stages the projection, dead-letter, side-effect intent and changelog
// records of the same Kafka transaction as the input offsets — and, for an
// event that came through the HTTP ingress and is new to the dedup store, its
// receipt (internal/core/receipt; never for a duplicate or a conflict, so the
// first committed receipt of a key stands). With the ingress configured it
// also consumes the ingress's claims topic, an internal input whose tasks
// decide each (tenant, key) once, for ever, and forward only the winning
// request's events to the input topic (claim.go;
// docs/design.md#one-request-per-key).
//
// Invariants (named in docs/design.md#invariants; the tests there prove them):
//
//   - behind-kafka: Pebble is never ahead of Kafka: a transaction's state is
//     staged in a state.Txn and written to Pebble, synced, only after End
//     reports committed. Every other End result discards the staged writes.
//   - changelog-closes-gap: Pebble may be behind Kafka; every staged write is
//     produced to the task's changelog partition in the same transaction. A
//     task is restored from its stored changelog offset to the partition's
//     last stable offset on assignment, and again once the group has fetched
//     the task's committed offsets (by then any transaction of a previous
//     owner has resolved), before its records are processed. Every record
//     restored is checked (restoreRecord): one the guard or dedup could not
//     read stops the restore, named (docs/contract.md#corrupt-changelog-records).
//   - read-your-writes: inside a transaction, guards and dedup read the
//     staged overlay first.
//   - one-order-per-aggregate: see internal/engine/guard, the version guard.
//   - fencing-is-fatal: the transactional id is stable per instance
//     (name-instanceId); an End error (fenced, or any other, none is
//     retryable) stops Run with an error.
//
// Goroutines: Run owns the loop and every client it creates. kgo's group
// callbacks only record assignment changes under a mutex; the loop acts on
// them between transactions. The records of different input partitions are
// processed on up to GOMAXPROCS goroutines at once (each partition's in
// order, on one goroutine), so a projection.Handler and the EffectRules are
// called concurrently and must not keep unsynchronised state; the built-in
// Rules and effect.Rules keep none. A committed transaction is written
// to Pebble on a goroutine while the next one runs (decision 004).
//
// Tracing (tracing.go): with Session.TracerProvider set, each transaction
// is one OpenTelemetry span, made when it ends, whose parent and links are
// its records' trace contexts (docs/contract.md#trace-context). The spans
// never change what a transaction writes, and their work is per
// transaction, not per record; unset, nothing is collected.
package processor
