// Package sideeffects is the side-effect executor runtime: the process role
// that turns side-effect intents into at most one external call success per
// idempotency key. Worker is the loop over the effects topic, exactly-once
// with the ledger's changelog; it runs one Runner per owned partition, which
// drives that partition's pending keys to an outcome through each effect's
// Caller; callRegistry is the registry of the calls in flight in the process.
//
// The other layers live in their own packages: the pure domain (intents,
// rules, the keyed ledger, statuses) in sideeffects/effect, the webhook
// Caller in sideeffects/webhook, test doubles in sideeffects/sideeffectstest;
// the operator's ledger reader and resolve command in internal/operator/ops.
//
// The pieces, in the order a key meets them:
//
//   - The processor produces an intent (effect.IntentValue) to the effects
//     topic in the transaction that applies its event.
//   - The Worker consumes it and offers it to the partition's ledger
//     (effect.Ledger.Offer) inside its own transaction: the first offer of a
//     key records it pending, every later one is a duplicate. An operator's
//     resolve and a revoked Runner's outcome report arrive the same way, as
//     Command records.
//   - The partition's Runner marks a due key in-flight, with the attempt's
//     deadline, and only once that is durably committed calls the effect's
//     Caller (a webhook.Client) with its whole timeout, then records the
//     outcome, each ledger update committed through the Worker's loop
//     (updates.go). An attempt that cannot get its whole timeout before its
//     deadline, or whose request the Caller did not send, is withdrawn
//     instead: it is no attempt (withdraw.go, docs/decisions/011).
//
// Invariants (named in docs/design.md#invariants):
//
//   - one-success-per-key: at most one success per key, ever. The ledger
//     refuses every transition out of a terminal entry (package effect), and
//     the Runner starts a key only through the ledger, so a succeeded or
//     failed key is never executed again, whatever is offered, enqueued or
//     restarted.
//   - in-flight-before-call: the transition to in-flight is committed
//     (Store.Update returned nil) before the Caller is called. A process that
//     stops between the call and the recording of its outcome leaves the
//     entry in-flight; the Runner's Run begins with Ledger.Recover, which
//     turns every in-flight entry into unknown, because the call may or may
//     not have taken effect.
//   - unknown-never-guessed: an unknown entry is either retried with the
//     same idempotency key (onUnknown: retry, for receivers that honour
//     Idempotency-Key) or parked until an operator resolves it
//     (Ledger.Resolve, "projector effects resolve"). It is never marked failed
//     or succeeded by the executor on its own, not even when maxAttempts is
//     exhausted: it then stays unknown for the operator. Every call is
//     cancelled at its attempt's deadline, which the ledger records when the
//     attempt starts (effect.Attempt.Deadline: start + start allowance +
//     the effect's timeout), and a retry happens no sooner than that
//     deadline – or, the later, the attempt's start plus the start allowance
//     and the effect's timeout as configured now – plus DeadlineMargin for
//     clock skew: the call it retries, made by whichever instance under whatever
//     configuration, has been given up by then, so a receiver is never sent
//     a second request for a key while the first may be open
//     (docs/contract.md#side-effect-webhook).
//   - ledger-is-authority: the ledger is the only authority. The Runner's
//     in-memory schedule is a hint; every execution decision is re-read from
//     the ledger inside the transaction that starts the attempt, so stale or
//     duplicate schedule entries are harmless; and a Runner starts only once
//     its partition's store agrees with the changelog (verification).
//   - staged-writes-only: every ledger update goes through a staged overlay
//     of the loop's state.Txn, so none of its writes outlives an aborted
//     Kafka transaction, and all of them reach the changelog.
//   - one-call-in-flight-per-key: one call per key at a time in a process. A
//     Runner holds the key's slot in the callRegistry, shared by a Worker's
//     Runners, from before it commits the in-flight mark until it has recorded the
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
//   - nothing-dropped-silently: every record of the effects topic – intent,
//     command or outcome report – is applied, or dead-lettered invalid:value
//     with the reason when it is malformed (a command is validated in full
//     before anything of it is applied) or the ledger refuses it. Only a
//     failure of the ledger's own store (effect.StoreFailed) stops the loop;
//     no content of a record can (workerTask.refuse). An intent whose ledger
//     entry could outgrow the record limit over its life
//     (effect.MaxRecordBytes) is dead-lettered too-large before it is
//     offered (toolarge.go): its changelog record would be refused at some
//     transition, failing every transaction of the partition, on every
//     restart. The processor refuses such intents; this catches the ones
//     that did not come through it.
//
// Rebuild mode (docs/design.md#no-effects-in-rebuild) is the caller's
// concern: in rebuild the processor produces no intents and no Worker runs.
package sideeffects
