package processor

import (
	"sort"
	"sync"
	"time"

	"github.com/projector-dev/projector/internal/state"
	"github.com/projector-dev/projector/projection"
)

// Outcomes lists every outcome label, in the contract's order, plus "failed"
// (handler error or held limit: dead-lettered).
var Outcomes = []string{"applied", "duplicate", "stale", "held", "conflict", "invalid", "failed"}

// tally counts one transaction's outcomes; it is published only on commit, so
// records processed again after an abort are not counted twice.
type tally struct {
	events  map[[2]string]int64 // (projection, outcome)
	dlq     map[string]int64
	effects map[[2]string]int64 // (effect, status)
}

func newTally() tally {
	return tally{events: map[[2]string]int64{}, dlq: map[string]int64{}, effects: map[[2]string]int64{}}
}

func (t tally) add(projection, outcome string) { t.events[[2]string{projection, outcome}]++ }
func (t tally) addN(projection, outcome string, n int) {
	if n > 0 {
		t.events[[2]string{projection, outcome}] += int64(n)
	}
}
func (t tally) addAll(gs []*projection.Guard, outcome string) {
	if len(gs) == 0 {
		t.add("", outcome)
	}
	for _, g := range gs {
		t.add(g.P.Name, outcome)
	}
}
func (t tally) deadLetter(reason string)     { t.dlq[reason]++ }
func (t tally) effect(effect, status string) { t.effects[[2]string{effect, status}]++ }

// Stats are the processor's committed counters. Record-level outcomes of
// records no projection accepts, and invalid records, count under projection "".
type Stats struct {
	mu        sync.Mutex
	events    map[[2]string]int64
	dlq       map[string]int64
	effects   map[[2]string]int64
	txns      map[string]int64
	txnTime   []time.Duration // recent transaction durations (ring)
	restored  int64
	assigned  map[state.Task]bool
	ready     bool
	observers []func(TxnObservation)
}

// TxnObservation is reported to observers after every transaction.
type TxnObservation struct {
	Result   string // committed, aborted, failed
	Duration time.Duration
}

func newStats() *Stats {
	return &Stats{
		events: map[[2]string]int64{}, dlq: map[string]int64{}, effects: map[[2]string]int64{},
		txns: map[string]int64{}, assigned: map[state.Task]bool{},
	}
}

func (s *Stats) addTally(t tally) {
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

func (s *Stats) addTxn(result string, d time.Duration) {
	s.mu.Lock()
	s.txns[result]++
	if result == "committed" {
		if len(s.txnTime) < 4096 {
			s.txnTime = append(s.txnTime, d)
		} else {
			s.txnTime[s.txns[result]%4096] = d
		}
	}
	obs := s.observers
	s.mu.Unlock()
	for _, o := range obs {
		o(TxnObservation{Result: result, Duration: d})
	}
}

func (s *Stats) addRestored(n int) {
	s.mu.Lock()
	s.restored += int64(n)
	s.mu.Unlock()
}

func (s *Stats) setAssigned(id state.Task, on bool) {
	s.mu.Lock()
	if on {
		s.assigned[id] = true
	} else {
		delete(s.assigned, id)
	}
	s.mu.Unlock()
}

func (s *Stats) setReady(r bool) {
	s.mu.Lock()
	s.ready = r
	s.mu.Unlock()
}

// Observe registers fn to be called after every transaction (metrics).
func (s *Stats) Observe(fn func(TxnObservation)) {
	s.mu.Lock()
	s.observers = append(s.observers, fn)
	s.mu.Unlock()
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

// Transactions returns the count of transactions by result.
func (s *Stats) Transactions(result string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.txns[result]
}

// Restored is the number of changelog records restored into Pebble.
func (s *Stats) Restored() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restored
}

// Ready reports whether every assigned partition is restored and processing.
func (s *Stats) Ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready && len(s.assigned) > 0
}

// Assigned lists the assigned tasks in order.
func (s *Stats) Assigned() []state.Task {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]state.Task, 0, len(s.assigned))
	for id := range s.assigned {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// TxnLatency returns the p-th percentile (0..1) of recent committed
// transaction durations.
func (s *Stats) TxnLatency(p float64) time.Duration {
	s.mu.Lock()
	d := append([]time.Duration(nil), s.txnTime...)
	s.mu.Unlock()
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	i := int(p * float64(len(d)-1))
	return d[i]
}
