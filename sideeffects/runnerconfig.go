package sideeffects

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/projector-dev/projector/sideeffects/effect"
	"github.com/projector-dev/projector/sideeffects/webhook"
)

// Store gives the Runner transactional access to one ledger (in the
// processor: the ledger of one effects-topic partition).
type Store interface {
	// Update runs fn on the ledger in one transaction and returns nil only
	// once the writes are durably committed: for the processor, the Kafka
	// transaction that carries them as changelog records has committed and
	// then Pebble has been written. If fn or the commit fails, none of the
	// writes may take effect. The Runner calls Update from several workers at
	// once; an implementation serialises them (or commits a group of them in
	// one transaction), and every fn must read what earlier Updates committed.
	Update(fn func(*effect.Ledger) error) error
	// View runs fn on the latest committed state; writes are discarded.
	View(fn func(*effect.Ledger) error) error
}

// Caller performs one call of a side effect (webhook.Client is the one the
// executor configures). It must be safe for concurrent use and must send
// in.Key as the idempotency key, so that a retry after an unknown outcome is
// recognised by the receiver. The Runner bounds the call by ctx's deadline.
type Caller interface {
	Call(ctx context.Context, in effect.Intent, body []byte) effect.Result
}

// Effect is how the Runner executes one configured effect. An effect called
// through its webhook is Effect{Caller: webhook.New(c)} with the retry
// policy wanted (internal/app/wiring builds the configuration file's so).
type Effect struct {
	Caller Caller
	// MaxAttempts bounds the calls per key; default effect.DefaultMaxAttempts.
	MaxAttempts int
	// OnUnknown is effect.OnUnknownRetry (default) or effect.OnUnknownPark.
	OnUnknown string
	// Timeout bounds one call, from when it is made: the Runner records the
	// attempt's deadline, its start plus RunnerConfig.StartAllowance plus
	// Timeout, in the ledger before the call, makes the call only if the
	// whole Timeout fits before that deadline, and retries an unknown
	// outcome no sooner than the later of the recorded deadline and what the
	// allowance and Timeout it has now give, plus DeadlineMargin. Zero takes
	// the caller's own timeout if it is a *webhook.Client with one, else
	// webhook.DefaultTimeout.
	Timeout time.Duration
}

// DeadlineMargin is added to an attempt's deadline (see Effect.Timeout)
// before its unknown outcome may be retried. The deadline was
// read from the clock of the instance that made the call, and the retry is
// decided by another instance's clock after a rebalance or a crash; hosts
// kept by NTP agree to within milliseconds, so a second covers their skew,
// and a call's own scheduling lag, with room to spare.
const DeadlineMargin = time.Second

// DefaultWorkers is the default number of concurrent calls of a Runner.
const DefaultWorkers = 4

// RunnerConfig configures a Runner. Zero values take the documented defaults.
type RunnerConfig struct {
	Store   Store             // required
	Effects map[string]Effect // by effect name; entries of other effects are left alone
	// Workers bounds concurrent calls; default DefaultWorkers.
	Workers int
	// Backoff is the delay before retry n (n ≥ 1); default backoff with a
	// private random source.
	Backoff func(n int) time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// OnChange, if set, is called after every transition the Runner
	// committed (from several goroutines): the hook for metrics.
	OnChange func(effect.Entry)
	// Logger defaults to discarding.
	Logger *slog.Logger
	// TracerProvider, when set, makes a span of every call (tracing.go,
	// docs/contract.md#trace-context); nil: no spans, and no cost.
	TracerProvider trace.TracerProvider
	// calls is the registry of calls in flight in this process, shared by
	// the Runners that may execute the same keys: a Worker's Runners, and
	// above all the successive Runners of one partition. Nil gives the
	// Runner its own.
	calls *callRegistry
	// Scope names the Runner's ledger among those sharing calls (the
	// worker's: the partition's task prefix), so that a handed-over outcome
	// is recorded only in the ledger its attempt belongs to.
	Scope string
	// Report, if set, is told the outcome of an attempt the Runner could
	// not record (its partition was revoked during the call): the worker
	// sends it to the partition's next owner, in whatever process, which
	// records it instead of calling the key again (Command op "outcome").
	Report func(key string, n int, a effect.Attempt, to effect.Status, next time.Time)
	// ReportWithdrawal, if set, is told of attempt n of key (started at
	// start) that the Runner withdrew – it never called it – but could not
	// record withdrawn: the worker sends it to the partition's next owner
	// like Report (Command op "withdraw").
	ReportWithdrawal func(key string, n int, start, next time.Time)
	// StartAllowance is the time the commit of an attempt's in-flight mark
	// may take; default DefaultStartAllowance. An attempt's deadline,
	// recorded when it starts, is its start plus StartAllowance plus the
	// effect's Timeout; a call that cannot have its whole Timeout before
	// that deadline once the mark is committed is not made, and its attempt
	// is withdrawn (not counted). Each withdrawal in a row doubles the
	// key's allowance, up to 16 times.
	StartAllowance time.Duration
}

// Validate reports a configuration the Runner cannot work with.
func (c *RunnerConfig) Validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("sideeffects: RunnerConfig.Store is required"))
	}
	if c.Workers < 0 {
		errs = append(errs, fmt.Errorf("sideeffects: RunnerConfig.Workers must not be negative, got %d", c.Workers))
	}
	if c.StartAllowance < 0 {
		errs = append(errs, fmt.Errorf("sideeffects: RunnerConfig.StartAllowance must not be negative, got %s", c.StartAllowance))
	}
	for name, e := range c.Effects {
		if e.Caller == nil {
			errs = append(errs, fmt.Errorf("sideeffects: effect %s: no executor", name))
		}
		if e.MaxAttempts < 0 {
			errs = append(errs, fmt.Errorf("sideeffects: effect %s: MaxAttempts must not be negative", name))
		}
		if e.Timeout < 0 {
			errs = append(errs, fmt.Errorf("sideeffects: effect %s: Timeout must not be negative", name))
		}
		if e.OnUnknown != "" && e.OnUnknown != effect.OnUnknownRetry && e.OnUnknown != effect.OnUnknownPark {
			errs = append(errs, fmt.Errorf("sideeffects: effect %s: OnUnknown must be %q or %q, got %q",
				name, effect.OnUnknownRetry, effect.OnUnknownPark, e.OnUnknown))
		}
	}
	return errors.Join(errs...)
}

func (c *RunnerConfig) applyDefaults() {
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.StartAllowance == 0 {
		c.StartAllowance = DefaultStartAllowance
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.calls == nil {
		c.calls = newCallRegistry()
	}
	if c.Backoff == nil {
		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		c.Backoff = func(n int) time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return backoff(n, rng)
		}
	}
	effects := make(map[string]Effect, len(c.Effects))
	for name, e := range c.Effects {
		if e.MaxAttempts == 0 {
			e.MaxAttempts = effect.DefaultMaxAttempts
		}
		if e.OnUnknown == "" {
			e.OnUnknown = effect.OnUnknownRetry
		}
		if e.Timeout == 0 {
			e.Timeout = webhook.DefaultTimeout
			if w, ok := e.Caller.(*webhook.Client); ok && w.Timeout > 0 {
				e.Timeout = w.Timeout
			}
		}
		effects[name] = e
	}
	c.Effects = effects
}
