// Package ops reads the processor's committed state for operator commands
// (gaps, inspect) and sends operator commands to the processor.
//
// Invariants (docs/design.md#ops-through-kafka):
//
//   - Tools never open the worker's Pebble store (a running worker holds its
//     lock, and Pebble may lag Kafka). They read the compacted changelog
//     topics, read_committed, from the start to the last stable offset at the
//     time of the call, and keep the last value per key: exactly what a
//     restore would put into Pebble. The result is the committed state; an
//     open transaction's writes are never seen.
//   - Tools never write state. A change (skip-gap) is a command record on the
//     input topic, applied by the partition's owner inside its transaction,
//     in order with the events, and recorded in the changelog like any other
//     change.
package ops

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/engine/guard"
	"github.com/projector-dev/projector/processor"
)

// ErrNoChangelog reports that no changelog topic of the processor exists.
var ErrNoChangelog = errors.New("ops: no changelog topic")

// ErrStall reports a changelog read that stopped making progress.
var ErrStall = errors.New("ops: changelog read stalled")

// Target names the changelogs to read.
type Target struct {
	Brokers    []string
	ClientOpts []kgo.Opt // TLS, SASL
	Group      string    // the processor's group (its name for the live worker)
	Inputs     []string
	// Stall bounds how long a read may see no record before ErrStall
	// (default 30s).
	Stall time.Duration
}

// Query selects what a read keeps. Zero values select everything.
type Query struct {
	Projection string
	Aggregate  string
	// States keeps state documents; without it they are dropped to bound
	// memory when every aggregate is read.
	States bool
	// Partitions restricts the read to these input partitions (by input
	// topic); nil reads every partition.
	Partitions map[string][]int32
}

// Aggregate is one (projection, aggregate) as the changelog has it.
type Aggregate struct {
	Projection string    `json:"projection"`
	Aggregate  string    `json:"aggregate"`
	Input      string    `json:"input"`
	Partition  int32     `json:"partition"`
	Found      bool      `json:"found"` // the guard has a record (events were applied or held)
	Version    int64     `json:"version"`
	Deleted    bool      `json:"deleted"`
	HeldSince  time.Time `json:"heldSince,omitzero"`
	// State is the state document (Query.States); nil when deleted or
	// never set.
	State json.RawMessage `json:"state,omitempty"`
	// Held are the events waiting behind a gap, by version. Entries at or
	// below Version (leftovers the guard drops on its next skip) are not
	// listed.
	Held []Held `json:"held"`
}

// Held is one held event.
type Held struct {
	Version   int64     `json:"version"`
	EventID   string    `json:"eventId"`
	EventType string    `json:"eventType"`
	Since     time.Time `json:"since"`
	Offset    int64     `json:"offset"` // of the original record on the input partition
}

// Task is the input partition.
func (a *Aggregate) Task() string { return a.Input + "/" + strconv.Itoa(int(a.Partition)) }

// Missing lists the versions the held events wait for, as ranges ("2",
// "4-6").
func (a *Aggregate) Missing() []string {
	var out []string
	prev := a.Version
	for _, h := range a.Held {
		switch {
		case h.Version == prev+2:
			out = append(out, strconv.FormatInt(prev+1, 10))
		case h.Version > prev+2:
			out = append(out, fmt.Sprintf("%d-%d", prev+1, h.Version-1))
		}
		prev = h.Version
	}
	return out
}

// State is the result of a read.
type State struct {
	// Aggregates in (projection, aggregate, input, partition) order.
	Aggregates []*Aggregate
	// Records is how many changelog records were read.
	Records int
}

// Gaps returns the aggregates with held events.
func (s *State) Gaps() []*Aggregate {
	var out []*Aggregate
	for _, a := range s.Aggregates {
		if len(a.Held) > 0 {
			out = append(out, a)
		}
	}
	return out
}

// HeldCount is the number of events aggregate holds in projection ("" all)
// across partitions.
func (s *State) HeldCount(projection, aggregate string) int {
	n := 0
	for _, a := range s.Aggregates {
		if a.Aggregate == aggregate && (projection == "" || a.Projection == projection) {
			n += len(a.Held)
		}
	}
	return n
}

// heldOf describes a held event from its stored form.
func heldOf(v int64, at time.Time, src guard.Source) *Held {
	h := &Held{Version: v, Since: at, Offset: src.Offset}
	var env struct {
		EventID   string `json:"eventId"`
		EventType string `json:"eventType"`
	}
	if json.Unmarshal(src.Value, &env) == nil {
		h.EventID, h.EventType = env.EventID, env.EventType
	}
	return h
}

type aggKey struct {
	projection, aggregate, input string
	partition                    int32
}

// Read reads the committed processor state selected by q.
func Read(ctx context.Context, t Target, q Query) (*State, error) {
	if t.Stall <= 0 {
		t.Stall = 30 * time.Second
	}
	topics := make(map[string]string, len(t.Inputs)) // changelog → input
	for _, in := range t.Inputs {
		topics[processor.ChangelogTopic(t.Group, in)] = in
	}
	ends, err := stableEnds(ctx, t, topics, q.Partitions)
	if err != nil {
		return nil, err
	}
	b := &stateBuilder{q: q, topics: topics, aggs: map[aggKey]*Aggregate{},
		held: map[aggKey]map[int64]*Held{}, inline: map[aggKey]*Held{}}
	if err := consume(ctx, t, ends, b.add); err != nil {
		return nil, err
	}
	return b.state(), nil
}

// stateBuilder keeps the last value per changelog key, as a restore would,
// for the aggregates a query selects.
type stateBuilder struct {
	q       Query
	topics  map[string]string // changelog → input
	records int
	aggs    map[aggKey]*Aggregate
	held    map[aggKey]map[int64]*Held
	inline  map[aggKey]*Held // the held event each aggregate record carries, as of its latest record
}

func (b *stateBuilder) get(k aggKey) *Aggregate {
	a := b.aggs[k]
	if a == nil {
		a = &Aggregate{Projection: k.projection, Aggregate: k.aggregate, Input: k.input, Partition: k.partition}
		b.aggs[k] = a
	}
	return a
}

// add takes one changelog record.
func (b *stateBuilder) add(r *kgo.Record) error {
	b.records++
	if len(r.Key) == 0 {
		return nil
	}
	switch r.Key[0] {
	case guard.KindAggregate:
		return b.addAggregate(r)
	case guard.KindHeld:
		return b.addHeld(r)
	}
	return nil
}

// addAggregate takes an aggregate record: its version, deletion, state and
// the held event it carries inline.
func (b *stateBuilder) addAggregate(r *kgo.Record) error {
	proj, agg, err := guard.ParseAggregateKey(r.Key)
	if err != nil || !b.q.selects(proj, agg) {
		return nil
	}
	k := aggKey{proj, agg, b.topics[r.Topic], r.Partition}
	a := b.get(k)
	if r.Value == nil { // deleted from state (never written by the guard today)
		*a = Aggregate{Projection: a.Projection, Aggregate: a.Aggregate, Input: a.Input, Partition: a.Partition}
		return nil
	}
	snap, err := guard.DecodeSnapshot(r.Value)
	if err != nil {
		return fmt.Errorf("ops: %s/%d offset %d: aggregate %q of %s: %w", r.Topic, r.Partition, r.Offset, agg, proj, err)
	}
	a.Found, a.Version, a.Deleted, a.HeldSince = true, snap.Version, snap.Deleted, snap.HeldSince
	delete(b.inline, k)
	if h := snap.Inline; h != nil {
		b.inline[k] = heldOf(h.Version, h.At, h.Source)
	}
	a.State = nil
	if b.q.States && !snap.Deleted && len(snap.State) > 0 {
		a.State = append(json.RawMessage(nil), snap.State...)
	}
	return nil
}

// addHeld takes a held-event record (nil value: the event left the guard).
func (b *stateBuilder) addHeld(r *kgo.Record) error {
	proj, agg, v, err := guard.ParseHeldKey(r.Key)
	if err != nil || !b.q.selects(proj, agg) {
		return nil
	}
	k := aggKey{proj, agg, b.topics[r.Topic], r.Partition}
	if r.Value == nil {
		delete(b.held[k], v)
		return nil
	}
	at, src, err := guard.DecodeHeld(r.Value)
	if err != nil {
		return fmt.Errorf("ops: %s/%d offset %d: held event v%d of %q in %s: %w", r.Topic, r.Partition, r.Offset, v, agg, proj, err)
	}
	if b.held[k] == nil {
		b.held[k] = map[int64]*Held{}
	}
	b.held[k][v] = heldOf(v, at, src)
	b.get(k)
	return nil
}

// state lists the aggregates with the events they still hold (those above
// their version), in (projection, aggregate, input, partition) order.
func (b *stateBuilder) state() *State {
	st := &State{Records: b.records}
	for k, a := range b.aggs {
		for _, h := range b.held[k] {
			if h.Version > a.Version {
				a.Held = append(a.Held, *h)
			}
		}
		if h := b.inline[k]; h != nil && h.Version > a.Version {
			a.Held = append(a.Held, *h)
		}
		sort.Slice(a.Held, func(i, j int) bool { return a.Held[i].Version < a.Held[j].Version })
		if a.Held == nil {
			a.Held = []Held{}
		}
		st.Aggregates = append(st.Aggregates, a)
	}
	sort.Slice(st.Aggregates, func(i, j int) bool {
		a, b := st.Aggregates[i], st.Aggregates[j]
		if a.Projection != b.Projection {
			return a.Projection < b.Projection
		}
		if a.Aggregate != b.Aggregate {
			return a.Aggregate < b.Aggregate
		}
		if a.Input != b.Input {
			return a.Input < b.Input
		}
		return a.Partition < b.Partition
	})
	return st
}

func (q Query) selects(proj, agg string) bool {
	return (q.Projection == "" || q.Projection == proj) && (q.Aggregate == "" || q.Aggregate == agg)
}
