package processor

import (
	"sync"
	"time"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/eos"
	"github.com/projector-dev/projector/projection"
)

// Outcomes lists every outcome label, in the contract's order, plus "failed"
// (handler error or held limit: dead-lettered) and "filtered" (a new event no
// projection accepts; counted under projection "").
var Outcomes = []string{"applied", "duplicate", "stale", "held", "conflict", "invalid", "too-large", "failed", "filtered"}

// tally is what one task's batch of a transaction changes outside Pebble:
// its outcome counts, the task's gap-index changes and dedup marks. Nothing of it takes effect before the transaction commits, so
// records processed again after an abort are not counted twice.
type tally struct {
	events  map[[2]string]int64 // (projection, outcome)
	dlq     map[string]int64
	effects map[[2]string]int64 // (effect, status)
	// ts is the batch's task.
	ts *taskState
	// gaps are the task's gap-index changes in the order they happened
	// (zero since: closed), applied in that order, so an aggregate's last
	// change wins. A list, not a map: a stream of held events changes a gap
	// per record, and a map growing by thousands per transaction cost more
	// than the change itself.
	gaps []gapChange
	// expired are the gaps this transaction expired (taskState.inflight
	// until it commits or aborts).
	expired []gapKey
	// seg collects the task's dedup marks into changelog segments; once
	// committed they enter the task's front cache of recent ids.
	seg dedup.Marks
}

// gapChange is one change of an aggregate's gap (zero since: closed).
type gapChange struct {
	key   gapKey
	since time.Time
}

// committed applies the task's changes once the transaction committed (in
// transaction order, so a gap a previous transaction opened and this one
// closes ends closed).
func (t *tally) committed() {
	for _, c := range t.gaps {
		if c.since.IsZero() {
			t.ts.closeGap(c.key)
		} else {
			t.ts.setGap(c.key, c.since)
		}
	}
	t.release()
	t.ts.dedup.Committed(&t.seg)
}

// expiring records that the transaction expires gap k: it is not due again
// before the transaction's end.
func (t *tally) expiring(k gapKey) {
	t.expired = append(t.expired, k)
	t.ts.inflight[k] = struct{}{}
}

// release ends the in-flight expiry of the transaction's gaps (committed:
// the index says what became of them; aborted: the restore rebuilds it).
func (t *tally) release() {
	for _, k := range t.expired {
		delete(t.ts.inflight, k)
	}
	t.expired = nil
}

func newTally(ts *taskState) *tally {
	return &tally{ts: ts, events: map[[2]string]int64{}, dlq: map[string]int64{}, effects: map[[2]string]int64{}}
}

func (t *tally) add(projection, outcome string) { t.events[[2]string{projection, outcome}]++ }
func (t *tally) addN(projection, outcome string, n int) {
	if n > 0 {
		t.events[[2]string{projection, outcome}] += int64(n)
	}
}
func (t *tally) addAll(gs []*projection.Guard, outcome string) {
	if len(gs) == 0 {
		t.add("", outcome)
	}
	for _, g := range gs {
		t.add(g.P.Name, outcome)
	}
}
func (t *tally) deadLetter(reason string)     { t.dlq[reason]++ }
func (t *tally) effect(effect, status string) { t.effects[[2]string{effect, status}]++ }

// Stats are the processor's committed counters. Record-level outcomes of
// records no projection accepts, and invalid records, count under projection
// "". The loop's counters (transactions, restores, readiness) are embedded.
type Stats struct {
	*eos.Stats
	mu      sync.Mutex
	events  map[[2]string]int64
	dlq     map[string]int64
	effects map[[2]string]int64
	gaps    map[string]GapSummary
	// expiries: gaps committed transactions took up for expiry, in all and
	// the most in one transaction.
	expiries, maxExpiries int64
}

// GapSummary is one projection's open gaps on this instance.
type GapSummary struct {
	Open   int       // aggregates with held events
	Oldest time.Time // start of the oldest open gap (zero when none)
}

// addExpiries counts the gaps a committed transaction took up for expiry.
func (s *Stats) addExpiries(n int) {
	s.mu.Lock()
	s.expiries += int64(n)
	s.maxExpiries = max(s.maxExpiries, int64(n))
	s.mu.Unlock()
}

// GapExpiries returns how many gaps committed transactions took up for
// expiry (a gap the transaction found filled or moved included) and the most
// one transaction took up (at most the per-transaction bound).
func (s *Stats) GapExpiries() (total, maxPerTxn int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expiries, s.maxExpiries
}

// TxnObservation is reported to observers after every transaction.
type TxnObservation = eos.TxnObservation

func newStats() *Stats {
	return &Stats{
		Stats:  eos.NewStats(),
		events: map[[2]string]int64{}, dlq: map[string]int64{}, effects: map[[2]string]int64{},
		gaps: map[string]GapSummary{},
	}
}

func (s *Stats) addTally(t *tally) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range t.events {
		s.events[k] += v
	}
	for k, v := range t.dlq {
		s.dlq[k] += v
	}
	for k, v := range t.effects {
		s.effects[k] += v
	}
}

// Events returns committed outcome counts for a projection ("" for record-level).
func (s *Stats) Events(projection, outcome string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.events[[2]string{projection, outcome}]
}

// Outcome sums an outcome over all projections.
func (s *Stats) Outcome(outcome string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for k, v := range s.events {
		if k[1] == outcome {
			n += v
		}
	}
	return n
}

// DeadLetters returns the committed dead-letter count for a reason.
func (s *Stats) DeadLetters(reason string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dlq[reason]
}

// Effects returns the committed count of side-effect intents by status.
func (s *Stats) Effects(effect, status string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effects[[2]string{effect, status}]
}

func (s *Stats) setGaps(g map[string]GapSummary) {
	s.mu.Lock()
	s.gaps = g
	s.mu.Unlock()
}

// Gaps returns, per projection, the open gaps of the assigned partitions.
func (s *Stats) Gaps() map[string]GapSummary {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]GapSummary, len(s.gaps))
	for k, v := range s.gaps {
		out[k] = v
	}
	return out
}
