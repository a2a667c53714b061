// Package effect is the side-effect domain, with no Kafka and no goroutines:
// the intents an applied event yields, the rules that derive them, and the
// keyed ledger that records every idempotency key's life. The executor
// runtime (package sideeffects) drives the ledger; the processor builds
// intents with Rules and IntentValue.
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
//   - Ledger.Start (StartUntil, with the attempt's deadline) marks a key
//     in-flight before its call; Record (or Succeed, Fail, Retry,
//     MarkUnknown) closes the attempt with its Outcome, and Withdraw takes
//     back one whose call never left; Recover, Resolve and Settle handle a
//     call whose outcome was not recorded.
//
// A Rule, its Condition and its key Template are plain Go, declared here and
// checked here (NewRules, Condition.Check, ParseTemplate): the package knows
// nothing of the configuration file, whose YAML mirror internal/app/wiring
// converts (docs/design.md#file-map). The retry policy's values and default
// (policy.go) are declared here once, and the configuration refers to them.
//
// Invariants (named in docs/design.md#invariants):
//
//   - one-success-per-key: at most one success per key, ever. A key whose
//     entry is succeeded or failed is terminal: every ledger transition out
//     of it is refused (*TransitionError), so it is never executed again,
//     whatever is offered, enqueued or restarted.
//   - in-flight-before-call: the ledger's half of it. Start is the only way
//     into in-flight, and Recover, run before any execution, turns every
//     in-flight entry into unknown, because the call may or may not have
//     taken effect. Committing Start before the call is the caller's half
//     (the sideeffects Runner).
//   - unknown-never-guessed: the ledger's half of it. Only Resolve (an
//     operator) or the outcome of an attempt moves an unknown entry to
//     succeeded or failed; Recover never does.
//   - ledger-is-authority: every transition re-reads the entry and checks the
//     status it leaves, so a caller acting on stale information is refused
//     rather than obeyed.
//   - staged-writes-only: the ledger reads and writes only through the KV it
//     is given (a staged state.Txn in the loops), so none of its writes
//     outlives an aborted Kafka transaction, and all of them reach the
//     changelog.
//   - outcome-survives-revoke: the ledger's half of it. Settle records the
//     outcome of attempt n handed over by another Runner only while the entry
//     still waits for exactly that attempt.
//   - nothing-dropped-silently: the ledger's half of it. Every error of a
//     ledger operation is a refusal (ErrInvalid, ErrBadIntent,
//     ErrIllegalTransition, ErrNotFound) or a failure of its own state
//     (ErrStore, ErrCorrupt: StoreFailed), so that a loop can dead-letter the
//     record behind a refused operation and stop only when its store fails.
//     And an entry's changelog record must fit kafka.maxRecordBytes at every
//     transition of the key's life, or the executor's transactions fail for
//     good. So every entry
//     written is bounded (bounds.go): at most MaxHistory attempts, texts
//     from outside cut by BoundText, JSON without HTML escaping; and
//     MaxRecordBytes, the largest record an intent's entry can become, is
//     computed by encoding the worst entry, for the processor and the
//     executor to refuse an intent it does not fit.
package effect
