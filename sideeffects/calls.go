package sideeffects

import (
	"context"
	"sync"
	"time"

	"github.com/projector-dev/projector/sideeffects/effect"
)

// orphanTTL is how long a handed-over outcome waits for the key's next
// Runner in this process. A partition given back to this process gets its
// Runner within a rebalance, seconds; one that went to another instance never
// comes for the outcome here (that instance retries the key after the
// attempt's deadline, and the receiver answers from its idempotency record),
// so the outcome is dropped rather than kept for the life of the process.
const orphanTTL = 10 * time.Minute

// callRegistry is the registry of effect calls in flight in one process,
// shared by every Runner of a Worker (a Runner without one gets its own).
//
// It exists for a partition revoked and assigned again in the same process:
// the new Runner recovers the key as unknown while the old Runner's call is
// still running (calls are not cancelled at a revoke, which would make each
// one's outcome unknown), and the receiver must never see two requests for
// one key at once (docs/contract.md#side-effect-webhook).
//
// Invariants (the first two named in docs/design.md#invariants):
//
//   - one-call-in-flight-per-key: one holder per idempotency key in the
//     process. A Runner holds the key's slot from before it commits the
//     in-flight mark until it has recorded the outcome or handed it over, so
//     this process never has two calls in flight for one key; a Runner that
//     finds the slot held waits.
//   - outcome-survives-revoke: a handed-over outcome (orphan) is taken once,
//     by the next holder of the key for the same ledger (orphan.Scope), which
//     records it with Ledger.Settle instead of calling again, or hands it back
//     if it cannot record it either. So a 2xx that happened is recorded as a
//     success, and this process does not call the key again.
//   - Bounded memory (local to callRegistry): memory is bounded by the calls in
//     flight plus the outcomes handed over in the last orphanTTL: an orphan
//     is dropped once taken, and one nobody takes expires.
type callRegistry struct {
	now func() time.Time // for expiry; a test may replace it

	mu    sync.Mutex
	held  map[string]chan struct{} // by key; closed when the slot is freed
	left  map[string]orphan        // by key
	swept time.Time
}

// orphan is the outcome of a call whose Runner could not record it, or an
// attempt it withdrew (never called) and could not record withdrawn.
type orphan struct {
	// Scope names the ledger of the attempt (RunnerConfig.Scope).
	Scope string
	// N is the attempt's number in that ledger entry.
	N      int
	Result effect.Result
	// Withdrawn: attempt N, which started at Start, was never called; the
	// next Runner withdraws it (Ledger.Withdraw) instead of recording
	// Result.
	Withdrawn bool
	Start     time.Time
	at        time.Time // when handed over
}

// newCallRegistry returns an empty registry.
func newCallRegistry() *callRegistry {
	return &callRegistry{now: time.Now, held: map[string]chan struct{}{}, left: map[string]orphan{}}
}

// callSlot is the right to call one key, held from Acquire until Release or
// HandOver.
type callSlot struct {
	c     *callRegistry
	key   string
	freed bool
}

// Acquire waits until no one in this process holds key, then holds it. It
// returns ctx's error if ctx is done first.
func (c *callRegistry) Acquire(ctx context.Context, key string) (*callSlot, error) {
	for {
		c.mu.Lock()
		freed, busy := c.held[key]
		if !busy {
			c.held[key] = make(chan struct{})
			c.mu.Unlock()
			return &callSlot{c: c, key: key}, nil
		}
		c.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// Take removes and returns the outcome handed over for the slot's key in
// scope, if one is there. An orphan of another scope stays for its own.
func (s *callSlot) Take(scope string) (orphan, bool) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweep()
	o, ok := c.left[s.key]
	if !ok || o.Scope != scope {
		return orphan{}, false
	}
	delete(c.left, s.key)
	if c.now().Sub(o.at) >= orphanTTL { // expired, not yet swept
		return orphan{}, false
	}
	return o, true
}

// Release frees the slot. Releasing again does nothing, so a deferred
// Release may follow a HandOver.
func (s *callSlot) Release() { s.free(nil) }

// HandOver frees the slot, leaving o for the key's next holder in o.Scope.
// It replaces an earlier orphan of the key: that one is of an earlier
// attempt, which Ledger.Settle would refuse anyway.
func (s *callSlot) HandOver(o orphan) { s.free(&o) }

func (s *callSlot) free(o *orphan) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.freed {
		return
	}
	s.freed = true
	if o != nil {
		o.at = c.now()
		c.left[s.key] = *o
		c.sweep()
	}
	close(c.held[s.key])
	delete(c.held, s.key)
}

// sweep drops expired orphans, at most once per tenth of orphanTTL so that
// a busy Runner does not walk the map on every key. c.mu is held.
func (c *callRegistry) sweep() {
	now := c.now()
	if len(c.left) == 0 || now.Sub(c.swept) < orphanTTL/10 {
		return
	}
	c.swept = now
	for k, o := range c.left {
		if now.Sub(o.at) >= orphanTTL {
			delete(c.left, k)
		}
	}
}
