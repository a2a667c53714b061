package sideeffects

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/projector-dev/projector/internal/config"
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
	Update(fn func(*Ledger) error) error
	// View runs fn on the latest committed state; writes are discarded.
	View(fn func(*Ledger) error) error
}

// Effect is how the Runner executes one configured effect.
type Effect struct {
	Executor Executor
	// MaxAttempts bounds the calls per key; default config.DefaultMaxAttempts.
	MaxAttempts int
	// OnUnknown is config.OnUnknownRetry (default) or config.OnUnknownPark.
	OnUnknown string
	// Timeout bounds one call: the Runner cancels it at the attempt's start
	// (as recorded in the ledger) plus Timeout, and retries an unknown
	// outcome no sooner than that deadline plus DeadlineMargin. Zero takes
	// the executor's own timeout if it is a *Webhook with one, else
	// config.DefaultWebhookTimeout.
	Timeout time.Duration
}

// DeadlineMargin is added to an attempt's deadline (its start plus the
// effect's Timeout) before its unknown outcome may be retried. The start was
// read from the clock of the instance that made the call, and the retry is
// decided by another instance's clock after a rebalance or a crash; hosts
// kept by NTP agree to within milliseconds, so a second covers their skew,
// and a call's own scheduling lag, with room to spare.
const DeadlineMargin = time.Second

// EffectsFromConfig builds the Runner's effects from the configuration, each
// with a Webhook executor.
func EffectsFromConfig(ses []config.SideEffect) map[string]Effect {
	m := make(map[string]Effect, len(ses))
	for _, s := range ses {
		m[s.Name] = Effect{Executor: NewWebhook(s.Webhook), MaxAttempts: s.MaxAttempts, OnUnknown: s.OnUnknown,
			Timeout: time.Duration(s.Webhook.Timeout)}
	}
	return m
}

// DefaultWorkers is the default number of concurrent calls of a Runner.
const DefaultWorkers = 4

// RunnerConfig configures a Runner. Zero values take the documented defaults.
type RunnerConfig struct {
	Store   Store             // required
	Effects map[string]Effect // by effect name; entries of other effects are left alone
	// Workers bounds concurrent executor calls; default DefaultWorkers.
	Workers int
	// Backoff is the delay before retry n (n ≥ 1); default Backoff with a
	// private random source.
	Backoff func(n int) time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
	// OnChange, if set, is called after every transition the Runner
	// committed (from several goroutines): the hook for metrics.
	OnChange func(Entry)
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Calls is the registry of calls in flight in this process, shared by
	// the Runners that may execute the same keys: a Worker's Runners, and
	// above all the successive Runners of one partition. Nil gives the
	// Runner its own.
	Calls *Calls
	// Scope names the Runner's ledger among those sharing Calls (the
	// worker's: the partition's task prefix), so that a handed-over outcome
	// is recorded only in the ledger its attempt belongs to.
	Scope string
	// Report, if set, is told the outcome of an attempt the Runner could
	// not record (its partition was revoked during the call): the worker
	// sends it to the partition's next owner, in whatever process, which
	// records it instead of calling the key again (Command op "outcome").
	Report func(key string, n int, a Attempt, to Status, next time.Time)
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
	for name, e := range c.Effects {
		if e.Executor == nil {
			errs = append(errs, fmt.Errorf("sideeffects: effect %s: no executor", name))
		}
		if e.MaxAttempts < 0 {
			errs = append(errs, fmt.Errorf("sideeffects: effect %s: MaxAttempts must not be negative", name))
		}
		if e.Timeout < 0 {
			errs = append(errs, fmt.Errorf("sideeffects: effect %s: Timeout must not be negative", name))
		}
		if e.OnUnknown != "" && e.OnUnknown != config.OnUnknownRetry && e.OnUnknown != config.OnUnknownPark {
			errs = append(errs, fmt.Errorf("sideeffects: effect %s: OnUnknown must be %q or %q, got %q",
				name, config.OnUnknownRetry, config.OnUnknownPark, e.OnUnknown))
		}
	}
	return errors.Join(errs...)
}

func (c *RunnerConfig) applyDefaults() {
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Calls == nil {
		c.Calls = NewCalls()
	}
	if c.Backoff == nil {
		var mu sync.Mutex
		rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
		c.Backoff = func(n int) time.Duration {
			mu.Lock()
			defer mu.Unlock()
			return Backoff(n, rng)
		}
	}
	effects := make(map[string]Effect, len(c.Effects))
	for name, e := range c.Effects {
		if e.MaxAttempts == 0 {
			e.MaxAttempts = config.DefaultMaxAttempts
		}
		if e.OnUnknown == "" {
			e.OnUnknown = config.OnUnknownRetry
		}
		if e.Timeout == 0 {
			e.Timeout = config.DefaultWebhookTimeout
			if w, ok := e.Executor.(*Webhook); ok && w.Timeout > 0 {
				e.Timeout = w.Timeout
			}
		}
		effects[name] = e
	}
	c.Effects = effects
}

// Runner drives ledger entries to an outcome: it starts due pending entries
// (and unknown ones under onUnknown: retry), at most Workers at a time,
// calls their executor and records the result, retrying with backoff.
//
// Order per attempt, which is what makes in-flight-before-call hold
// (docs/design.md#in-flight-before-call):
//
//  0. Hold the key's slot in Calls, waiting while another Runner of this
//     process still has a call for it; if that Runner handed its outcome
//     over, record it (Ledger.Settle) and stop here.
//  1. Update: re-read the entry; if it is due, Start it (→ in-flight). Commit.
//  2. Only then call the executor, until the attempt's deadline (its start
//     plus Effect.Timeout).
//  3. Update: record the outcome (succeeded, failed, pending for a retry,
//     unknown). Commit. If that fails (the partition was revoked), hand the
//     outcome over through Calls to the key's next Runner in this process.
//  4. Free the slot.
//
// A crash between 1 and 3 leaves the entry in-flight; the next Run begins
// with Ledger.Recover, which turns it into unknown. An unknown entry is
// retried no sooner than its last attempt's deadline plus DeadlineMargin, so
// that a call another instance may still be making has ended first; within
// one process, Calls keeps Runners from overlapping whatever the clock says.
//
// Store errors are fatal to Run: without the store the Runner can neither
// guarantee in-flight-before-call nor record outcomes, and the restart's
// Recover puts things right. In the processor there is one Runner per
// effects-topic partition, run while the partition is assigned.
type Runner struct {
	cfg  RunnerConfig
	wake chan struct{}

	mu      sync.Mutex
	sched   schedule
	active  map[string]bool // keys a worker holds
	again   map[string]bool // enqueued while active: look again when done
	started bool
}

// NewRunner validates cfg and returns a Runner.
func NewRunner(cfg RunnerConfig) (*Runner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.applyDefaults()
	return &Runner{cfg: cfg, wake: make(chan struct{}, 1), active: make(map[string]bool), again: make(map[string]bool)}, nil
}

// Enqueue asks the Runner to look at key now. It never blocks and is safe
// before Run. The processor calls it from the after-commit hook of the
// transaction in which Ledger.Offer created the key.
func (r *Runner) Enqueue(key string) { r.schedule(key, time.Time{}) }

// Offer parses an intents-topic value, offers it to the ledger in its own
// transaction and enqueues the key if it is new. The processor offers
// inside its consume transactions instead (and calls Enqueue); Offer serves
// tools and tests.
func (r *Runner) Offer(value []byte) (e Entry, dup bool, err error) {
	in, err := ParseIntent(value)
	if err != nil {
		return Entry{}, false, err
	}
	err = r.cfg.Store.Update(func(l *Ledger) error {
		e, dup, err = l.Offer(in, r.cfg.Now())
		return err
	})
	if err != nil {
		return Entry{}, false, err
	}
	if !dup {
		r.Enqueue(in.Key)
	}
	return e, dup, nil
}

// Resolve settles an unknown key by hand (see Ledger.Resolve).
func (r *Runner) Resolve(key string, outcome Status, note string) (Entry, error) {
	var e Entry
	err := r.cfg.Store.Update(func(l *Ledger) (err error) {
		e, err = l.Resolve(key, outcome, note, r.cfg.Now())
		return err
	})
	if err == nil {
		r.changed(e)
	}
	return e, err
}

// Run recovers the ledger, then executes due entries until ctx is done. It
// returns nil after a cancellation, or the first store error. Calls in
// progress at cancellation are allowed to finish (each is bounded by its
// effect's timeout) and recorded, so that a clean shutdown creates no
// unknown outcomes. Run may be called once.
func (r *Runner) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return errors.New("sideeffects: Runner.Run called twice")
	}
	r.started = true
	r.mu.Unlock()

	// Recover before anything is executed, and commit it: an in-flight entry
	// from an earlier life must never be mistaken for one of ours.
	var recovered []Entry
	if err := r.cfg.Store.Update(func(l *Ledger) (err error) {
		recovered, err = l.Recover(r.cfg.Now())
		return err
	}); err != nil {
		return fmt.Errorf("sideeffects: recover: %w", err)
	}
	for _, e := range recovered {
		r.cfg.Logger.Warn("side effect outcome unknown after restart", "key", e.Key, "effect", e.Effect, "attempts", e.Attempts)
		r.changed(e)
	}
	if err := r.cfg.Store.View(func(l *Ledger) error {
		return l.Scan(func(e Entry) error {
			if due, ok := r.runnable(e); ok {
				r.schedule(e.Key, due)
			}
			return nil
		})
	}); err != nil {
		return fmt.Errorf("sideeffects: load ledger: %w", err)
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := make(chan string)
	var wg sync.WaitGroup
	for range r.cfg.Workers {
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case key := <-work:
					if ctx.Err() != nil { // shutting down: start nothing new
						r.release(key)
						return
					}
					if err := r.process(ctx, key); err != nil {
						cancel(err)
					}
					r.release(key)
				}
			}
		})
	}

	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		key, wait := r.next()
		if key != "" {
			select {
			case work <- key:
				continue
			case <-ctx.Done():
				r.release(key)
			}
		}
		if ctx.Err() != nil {
			break
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
		case <-r.wake:
		case <-timer.C:
		}
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// runnable reports whether the Runner should execute e, and from when.
func (r *Runner) runnable(e Entry) (time.Time, bool) {
	eff, ok := r.cfg.Effects[e.Effect]
	if !ok {
		return time.Time{}, false
	}
	switch e.Status {
	case Pending:
		return e.NextAttempt, true
	case Unknown:
		// Parked, or out of attempts: an unknown outcome is never retried
		// without a policy that says the receiver honours the key.
		if eff.OnUnknown == config.OnUnknownRetry && e.Attempts < eff.MaxAttempts {
			// The unknown attempt may still be running, made by another
			// instance or an earlier Runner (Recover cannot tell a call
			// that stopped from one that goes on): not before it is over.
			due := e.NextAttempt
			if n := len(e.History); n > 0 {
				if d := e.History[n-1].Start.Add(eff.Timeout + DeadlineMargin); d.After(due) {
					due = d
				}
			}
			return due, true
		}
	}
	return time.Time{}, false
}

// process runs one attempt of key, if the ledger says it is due.
func (r *Runner) process(ctx context.Context, key string) error {
	// One call per key in this process: a slot still held is the call of
	// an earlier Runner of this partition, revoked and given back to us.
	slot, err := r.cfg.Calls.Acquire(ctx, key)
	if err != nil {
		return nil // shutting down: the key stays for the next Runner
	}
	defer slot.Release()
	if o, ok := slot.Take(r.cfg.Scope); ok {
		settled, err := r.settle(key, o)
		if err != nil {
			slot.HandOver(o) // still unrecorded: keep it for the next Runner
			return err
		}
		if settled {
			return nil
		}
	}

	var (
		e     Entry
		start bool
		later time.Time
	)
	err = r.cfg.Store.Update(func(l *Ledger) error {
		start, later = false, time.Time{}
		cur, ok, err := l.Get(key)
		if err != nil || !ok {
			return err
		}
		due, ok := r.runnable(cur)
		if !ok {
			return nil
		}
		now := r.cfg.Now()
		if due.After(now) {
			later = due
			return nil
		}
		e, err = l.Start(key, now)
		start = err == nil
		return err
	})
	if err != nil {
		return fmt.Errorf("sideeffects: start %q: %w", key, err)
	}
	if !later.IsZero() {
		r.schedule(key, later)
	}
	if !start {
		return nil
	}
	// The in-flight mark is committed: from here on a crash means unknown.
	r.changed(e)
	eff := r.cfg.Effects[e.Effect]
	in, perr := ParseIntent(e.Intent)
	if perr != nil {
		in = Intent{Key: e.Key, Effect: e.Effect, Value: e.Intent}
	}
	// Not cancelled with ctx: a shutdown or a revoke lets the call finish
	// rather than manufacture an unknown outcome. It is bounded by the
	// attempt's deadline, which is what a Runner elsewhere waits for before
	// it retries an unknown outcome of this attempt.
	deadline := e.History[len(e.History)-1].Start.Add(eff.Timeout)
	callCtx, cancelCall := context.WithTimeout(context.WithoutCancel(ctx), deadline.Sub(r.cfg.Now()))
	res := eff.Executor.Execute(callCtx, in, e.Intent)
	cancelCall()

	// One decision (its backoff is random): recorded here, or reported to
	// the partition's next owner if the record fails.
	a, to, next := r.outcome(eff, e.Attempts, res)
	var done Entry
	err = r.cfg.Store.Update(func(l *Ledger) (err error) {
		done, err = l.finish(key, "record "+to.String(), a, to, next)
		return err
	})
	if err != nil {
		// The partition was revoked while the call ran, or the store
		// failed. The outcome is real: if this process gets the partition
		// back, its next Runner records it rather than calling again.
		slot.HandOver(Orphan{Scope: r.cfg.Scope, N: e.Attempts, Result: res})
		if r.cfg.Report != nil {
			r.cfg.Report(key, e.Attempts, a, to, next)
		}
		return fmt.Errorf("sideeffects: record %q: %w", key, err)
	}
	r.changed(done)
	if due, ok := r.runnable(done); ok {
		r.schedule(key, due)
	}
	return nil
}

// settle records the outcome an earlier Runner handed over, if the ledger
// still waits for it (the entry is in-flight or unknown at the orphan's
// attempt), and reports whether it did. A stale orphan is dropped.
func (r *Runner) settle(key string, o Orphan) (bool, error) {
	var (
		done  Entry
		stale error
	)
	err := r.cfg.Store.Update(func(l *Ledger) error {
		stale = nil
		cur, ok, err := l.Get(key)
		if err != nil || !ok {
			stale = ErrNotFound
			return err
		}
		eff, ok := r.cfg.Effects[cur.Effect]
		if !ok {
			stale = fmt.Errorf("sideeffects: effect %q is not this Runner's", cur.Effect)
			return nil
		}
		a, to, next := r.outcome(eff, o.N, o.Result)
		done, err = l.Settle(key, o.N, a, to, next)
		if errors.Is(err, ErrIllegalTransition) {
			stale, err = err, nil
		}
		return err
	})
	if err != nil {
		return false, fmt.Errorf("sideeffects: settle %q: %w", key, err)
	}
	if stale != nil {
		r.cfg.Logger.Info("dropped the outcome of an earlier call: the ledger has moved on", "key", key, "attempt", o.N, "reason", stale)
		return false, nil
	}
	r.cfg.Logger.Info("recorded the outcome of a call made before the partition was reassigned",
		"key", key, "attempt", o.N, "outcome", o.Result.Outcome, "status", done.Status)
	r.changed(done)
	if due, ok := r.runnable(done); ok {
		r.schedule(key, due)
	}
	return true, nil
}

// outcome is the ledger's record of attempt n's result: the attempt, the
// status it moves the entry to and, for a retry, when.
func (r *Runner) outcome(eff Effect, n int, res Result) (a Attempt, to Status, next time.Time) {
	a = Attempt{Duration: res.Duration, Outcome: res.Outcome, StatusCode: res.StatusCode, Ref: res.Ref}
	if res.Err != nil {
		a.Error = res.Err.Error()
	}
	now := r.cfg.Now()
	switch res.Outcome {
	case OutcomeSucceeded:
		return a, Succeeded, time.Time{}
	case OutcomeFailed:
		return a, Failed, time.Time{}
	case OutcomeRetryable:
		if n >= eff.MaxAttempts {
			a.Error = fmt.Sprintf("%s; giving up after %d attempts", a.Error, n)
			return a, Failed, time.Time{}
		}
		return a, Pending, now.Add(r.cfg.Backoff(n))
	default: // OutcomeUnknown, or an executor that could not tell
		a.Outcome = OutcomeUnknown
		if eff.OnUnknown == config.OnUnknownRetry {
			next = now.Add(r.cfg.Backoff(n))
		}
		return a, Unknown, next
	}
}

func (r *Runner) changed(e Entry) {
	if r.cfg.OnChange != nil {
		r.cfg.OnChange(e)
	}
}

// schedule adds (key, due) to the schedule and wakes the dispatcher.
func (r *Runner) schedule(key string, due time.Time) {
	r.mu.Lock()
	heap.Push(&r.sched, item{key: key, due: due})
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// next pops a due key that no worker holds and marks it held; otherwise it
// returns how long to wait for the earliest one.
func (r *Runner) next() (string, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.cfg.Now()
	for r.sched.Len() > 0 {
		top := r.sched[0]
		if top.due.After(now) {
			return "", top.due.Sub(now)
		}
		heap.Pop(&r.sched)
		if r.active[top.key] {
			r.again[top.key] = true
			continue
		}
		r.active[top.key] = true
		return top.key, 0
	}
	return "", time.Hour
}

// release frees key; if it was enqueued meanwhile, it is looked at again.
func (r *Runner) release(key string) {
	r.mu.Lock()
	delete(r.active, key)
	again := r.again[key]
	delete(r.again, key)
	r.mu.Unlock()
	if again {
		r.Enqueue(key)
	}
}

type item struct {
	key string
	due time.Time
}

// schedule is a min-heap of keys by due time. It may hold a key more than
// once; the ledger decides what each pop means.
type schedule []item

func (s schedule) Len() int           { return len(s) }
func (s schedule) Less(i, j int) bool { return s[i].due.Before(s[j].due) }
func (s schedule) Swap(i, j int)      { s[i], s[j] = s[j], s[i] }
func (s *schedule) Push(x any)        { *s = append(*s, x.(item)) }
func (s *schedule) Pop() any {
	old := *s
	it := old[len(old)-1]
	*s = old[:len(old)-1]
	return it
}

// Backlog is how many keys wait for an attempt or are being executed.
func (r *Runner) Backlog() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sched) + len(r.active)
}
