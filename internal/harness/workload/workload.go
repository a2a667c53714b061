// Package workload generates seeded event streams with the faults projector
// exists to absorb (duplicates re-delivered at later offsets, some
// re-serialised; reordered versions; gaps filled late; stale writers;
// conflicting reuse of event ids; invalid records) together with the expected
// result, computed by a reference fold that shares no code with the processor.
// Tests, the demo and the benchmark use it.
package workload

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
)

// Options shape a stream. Rates are fractions of Events.
type Options struct {
	Seed        uint64
	Events      int // unique, valid, versioned events
	Aggregates  int
	Duplicates  float64 // re-delivered copies at later offsets
	Reserialize float64 // share of duplicates re-serialised (key order, spacing, escapes)
	Reorder     float64 // adjacent versions swapped (held, then drained)
	LateGaps    float64 // a version moved far later (a gap filled late)
	Stale       float64 // new event id, old version
	Conflicts   float64 // reused event id, different payload
	Invalid     float64 // malformed records
	Deletes     float64 // share of aggregates with a CaseClosed (delete) somewhere
	// AggregateType for all events (default RegulatoryCase).
	AggregateType string
}

// Defaults are the integration-test mix.
func Defaults() Options {
	return Options{Seed: 1, Events: 100_000, Aggregates: 10_000, Duplicates: 0.12, Reserialize: 0.5,
		Reorder: 0.02, LateGaps: 0.005, Stale: 0.01, Conflicts: 0.005, Invalid: 0.005, Deletes: 0.05}
}

// Record is one input record.
type Record struct {
	Key, Value []byte
	Kind       Kind
}

// Kind says what the generator meant a record to be.
type Kind uint8

const (
	KindEvent Kind = iota
	KindDuplicate
	KindStale
	KindConflict
	KindInvalid
)

// Final is the expected last state of one aggregate.
type Final struct {
	Version int64
	State   map[string]any // nil when deleted
	Deleted bool
}

// Expect is what a correct processor produces for the stream.
type Expect struct {
	Final       map[string]Final
	Applied     int
	Duplicates  int
	Stale       int
	Held        int
	Conflicts   int
	Invalid     int
	DeadLetters map[string]int // reason → count (invalid:<field> and conflict)
	// DeadLetterValues are the exact values expected on the dead-letter topic.
	DeadLetterValues map[string]string // value → reason
}

type ev struct {
	id, typ, agg, tenant string
	version              int64
	payload              map[string]any
}

// Generate builds the stream and its expectation.
func Generate(o Options) ([]Record, Expect) {
	if o.AggregateType == "" {
		o.AggregateType = "RegulatoryCase"
	}
	if o.Aggregates <= 0 {
		o.Aggregates = 1
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	g := &gen{o: o, rng: rng}
	// The steps draw from rng in this order; the streams of a seed depend on
	// it.
	histories := g.histories()
	stream := g.interleave(histories)
	g.reorder(stream, histories)
	g.lateGaps(stream)
	exp := Expect{Final: map[string]Final{}, DeadLetters: map[string]int{}, DeadLetterValues: map[string]string{}}
	recs := g.inject(stream, &exp)
	fold(recs, &exp)
	finals(histories, &exp)
	return recs, exp
}

type gen struct {
	o   Options
	rng *rand.Rand
}

func aggName(a int) string { return fmt.Sprintf("CASE-%06d", a) }
func aggIndex(s string) int {
	n, _ := strconv.Atoi(s[5:])
	return n
}

// history makes aggregate a's n events.
func (g *gen) history(a, n int) []ev {
	agg := aggName(a)
	tenant := ""
	if a%3 == 0 {
		tenant = "tenant-" + strconv.Itoa(a%7)
	}
	h := make([]ev, n)
	closeAt := -1
	if n > 2 && g.rng.Float64() < g.o.Deletes {
		closeAt = 1 + g.rng.IntN(n-1)
	}
	for i := range h {
		e := ev{id: fmt.Sprintf("%s-ev-%d", agg, i+1), agg: agg, tenant: tenant, version: int64(i + 1)}
		switch {
		case i == 0:
			e.typ, e.payload = "CaseOpened", map[string]any{"status": "OPEN", "title": "Case " + agg, "priority": float64(g.rng.IntN(5))}
		case i == closeAt:
			e.typ = "CaseClosed"
		case g.rng.IntN(10) == 0:
			e.typ = "CaseNoted" // unlisted: advances the version only
			e.payload = map[string]any{"note": "n" + strconv.Itoa(i)}
		case g.rng.IntN(6) == 0:
			e.typ, e.payload = "CaseEscalated", map[string]any{"status": "ESCALATED", "reasonCode": []string{"SLA_BREACH", "CUSTOMER"}[g.rng.IntN(2)], "level": float64(i)}
		default:
			p := map[string]any{"updates": float64(i), "owner": "user-" + strconv.Itoa(g.rng.IntN(50))}
			if g.rng.IntN(4) == 0 {
				p["details"] = map[string]any{"k" + strconv.Itoa(g.rng.IntN(3)): "v" + strconv.Itoa(i), "drop": nil}
			}
			if g.rng.IntN(8) == 0 {
				p["title"] = nil // merge-patch removal
			}
			e.typ, e.payload = "CaseUpdated", p
		}
		h[i] = e
	}
	return h
}

// Event is what checkers key on in a first delivery: its type, aggregate,
// version and payload.
type Event struct {
	Type    string         `json:"eventType"`
	Agg     string         `json:"aggregateId"`
	Version int64          `json:"aggregateVersion"`
	Payload map[string]any `json:"payload"`
}

// FirstDeliveries decodes the first deliveries (KindEvent) of recs, in
// order: the events a correct processor applies eventually (duplicates,
// stale writers, conflicts and invalid records are left out). A first
// delivery that does not decode is the generator's bug: the error says which.
func FirstDeliveries(recs []Record) ([]Event, error) {
	var out []Event
	for i, r := range recs {
		if r.Kind != KindEvent {
			continue
		}
		var e Event
		if err := json.Unmarshal(r.Value, &e); err != nil {
			return nil, fmt.Errorf("workload: record %d (a first delivery): %w", i, err)
		}
		out = append(out, e)
	}
	return out, nil
}
