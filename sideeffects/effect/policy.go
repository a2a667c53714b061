package effect

// The retry policy of an effect, as the executor applies it
// (sideeffects.Effect) and the configuration file sets it
// (sideEffects[].maxAttempts and onUnknown): declared here, once.

// DefaultMaxAttempts bounds the attempts of a key whose effect sets no
// MaxAttempts: retryable failures are retried, and unknown outcomes with
// OnUnknownRetry, until a key has had that many.
const DefaultMaxAttempts = 8

// What the executor does with a call whose outcome is unknown (the request
// may have reached the receiver, and no answer came;
// docs/design.md#unknown-never-guessed).
const (
	// OnUnknownRetry calls the key again, with the same idempotency key,
	// while attempts remain: for receivers that honour Idempotency-Key. The
	// default.
	OnUnknownRetry = "retry"
	// OnUnknownPark leaves the key unknown until an operator resolves it.
	OnUnknownPark = "park"
)
