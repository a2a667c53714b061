package processor

import (
	"sync"
	"time"

	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/engine/guard"
)

// tally counts one task batch's outcomes, dead letters and intents; the
// counts reach Stats once the transaction commits (batchState).
type tally struct {
	// events is a list, not a map: a batch sees a handful of
	// (projection, outcome) pairs, and every event adds to one, so a scan
	// comparing each pair's projection name by pointer first costs less
	// than hashing the name into a map per event. last is the pair the
	// previous add found.
	events  []eventCount
	last    int
	dlq     map[string]int64
	effects map[effectKey]int64
}

// eventKey and effectKey are what the counts are kept by.
type (
	eventKey struct {
		projection string
		outcome    Outcome
	}
	eventCount struct {
		key eventKey
		n   int64
	}
	effectKey struct {
		effect string
		status IntentStatus
	}
)

func newTally() tally {
	return tally{dlq: map[string]int64{}, effects: map[effectKey]int64{}}
}

func (t *tally) add(projection string, outcome Outcome) { t.addN(projection, outcome, 1) }
func (t *tally) addN(projection string, outcome Outcome, n int) {
	if n <= 0 {
		return
	}
	k := eventKey{projection, outcome}
	if t.last < len(t.events) && t.events[t.last].key == k {
		t.events[t.last].n += int64(n)
		return
	}
	for i := range t.events {
		if t.events[i].key == k {
			t.events[i].n += int64(n)
			t.last = i
			return
		}
	}
	t.last = len(t.events)
	t.events = append(t.events, eventCount{k, int64(n)})
}
func (t *tally) addAll(gs []*guard.Guard, outcome Outcome) {
	if len(gs) == 0 {
		t.add("", outcome)
	}
	for _, g := range gs {
		t.add(g.P.Name, outcome)
	}
}
func (t *tally) deadLetter(reason string) { t.dlq[reason]++ }
func (t *tally) effect(effect string, status IntentStatus) {
	t.effects[effectKey{effect, status}]++
}

// Stats are the processor's committed counters. Record-level outcomes of
// records no projection accepts, and invalid records, count under projection
// "". The loop's counters (transactions, restores, readiness) are
// loopstats.go's.
type Stats struct {
	loop    *eos.Stats
	mu      sync.Mutex
	events  map[eventKey]int64
	dlq     map[string]int64
	effects map[effectKey]int64
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

func newStats() *Stats {
	return &Stats{
		loop:   eos.NewStats(),
		events: map[eventKey]int64{}, dlq: map[string]int64{}, effects: map[effectKey]int64{},
		gaps: map[string]GapSummary{},
	}
}

func (s *Stats) addTally(t *tally) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range t.events {
		s.events[e.key] += e.n
	}
	for k, v := range t.dlq {
		s.dlq[k] += v
	}
	for k, v := range t.effects {
		s.effects[k] += v
	}
}

// Events returns committed outcome counts for a projection ("" for record-level).
func (s *Stats) Events(projection string, outcome Outcome) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.events[eventKey{projection, outcome}]
}

// Outcome sums an outcome over all projections.
func (s *Stats) Outcome(outcome Outcome) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for k, v := range s.events {
		if k.outcome == outcome {
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
func (s *Stats) Effects(effect string, status IntentStatus) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effects[effectKey{effect, status}]
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
