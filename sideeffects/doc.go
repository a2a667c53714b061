// Package sideeffects turns side-effect intents into at most one external call
// success per idempotency key: the rules that derive intents from applied
// events, the keyed ledger that records every key's life, the webhook
// executor, and the Runner that drives pending keys to an outcome.
//
// The pieces, in the order a key meets them:
//
//   - Rules derives intents (effect name + idempotency key) from an applied
//     event; IntentValue builds the record value produced to the intents topic
//     (docs/contract.md#side-effect-intents-topic) and ParseIntent reads it
//     back.
//   - Ledger.Offer records a key as pending the first time it is seen. Every
//     later offer of the same key, from a redelivery or from another
//     projection, is a duplicate and changes nothing.
//   - The Runner marks a due key in-flight, and only once that is durably
//     committed calls the Executor (the Webhook), then records the outcome.
//
// Invariants (named in docs/design.md#invariants):
//
//   - one-success-per-key: at most one success per key, ever. A key whose
//     entry is succeeded or failed is terminal: every ledger transition out
//     of it is refused, so it is never executed again, whatever is offered,
//     enqueued or restarted.
//   - in-flight-before-call: the transition to in-flight is committed
//     (Store.Update returned nil) before the executor is called. A process
//     that stops between the call and the recording of its outcome leaves the
//     entry in-flight; Ledger.Recover, run before any execution, turns every
//     in-flight entry into unknown, because the call may or may not have taken
//     effect.
//   - unknown-never-guessed: an unknown entry is either retried with the
//     same idempotency key (onUnknown: retry, for receivers that honour
//     Idempotency-Key) or parked until an operator resolves it
//     (Ledger.Resolve, "projector effects resolve"). It is never marked failed
//     or succeeded by the executor on its own, not even when maxAttempts is
//     exhausted: it then stays unknown for the operator. A retry happens no
//     sooner than the unknown attempt's deadline (its start plus the effect's
//     timeout, plus DeadlineMargin for clock skew), and every call is
//     cancelled at its deadline: the call it retries, made by whichever
//     instance, has been given up by then, so a receiver is never sent a
//     second request for a key while the first may be open
//     (docs/contract.md#side-effect-webhook).
//   - ledger-is-authority: the ledger is the only authority. The Runner's
//     in-memory schedule is a hint; every execution decision is re-read from
//     the ledger inside the transaction that starts the attempt, so stale or
//     duplicate schedule entries are harmless.
//   - staged-writes-only: the ledger reads and writes only through the KV it
//     is given (a staged state.Txn in the processor), so none of its writes
//     outlives an aborted Kafka transaction, and all of them reach the
//     changelog.
//   - one-call-in-flight-per-key: one call per key at a time in a process. A
//     Runner holds the key's slot in Calls, shared by a Worker's Runners,
//     from before it commits the in-flight mark until it has recorded the
//     outcome; a Runner whose partition was revoked while its call ran hands
//     the outcome over there, and the partition's next Runner in the process
//     records it (Ledger.Settle) instead of calling again.
//   - outcome-survives-revoke: an outcome is never lost to a revoke. A Runner
//     that can no longer record its call's outcome also reports it (Command
//     op "outcome") on the effects topic, keyed like the intent, so the
//     partition's owner in any process records it inside its own
//     transaction, as long as the ledger still waits for that attempt. If the
//     report is lost, unknown-never-guessed applies: the key is retried with
//     the same idempotency key after the attempt's deadline.
//
// Rebuild mode (docs/design.md#no-effects-in-rebuild) is the caller's
// concern: in rebuild the processor neither produces intents nor runs a
// Runner.
package sideeffects
