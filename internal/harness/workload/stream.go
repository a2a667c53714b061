package workload

import (
	"fmt"
	"slices"
	"sort"
)

// histories spreads Events over Aggregates, each with at least one version,
// and makes each aggregate's events in version order.
func (g *gen) histories() [][]ev {
	o, rng := g.o, g.rng
	counts := make([]int, o.Aggregates)
	for i := range counts {
		counts[i] = 1
	}
	for i := o.Aggregates; i < o.Events; i++ {
		counts[rng.IntN(o.Aggregates)]++
	}
	var histories [][]ev
	for a, n := range counts {
		histories = append(histories, g.history(a, n))
	}
	return histories
}

// interleave merges the aggregates' histories at random, keeping each
// aggregate's order.
func (g *gen) interleave(histories [][]ev) []*ev {
	var stream []*ev
	next := make([]int, len(histories))
	live := make([]int, 0, len(histories))
	for a := range histories {
		live = append(live, a)
	}
	for len(live) > 0 {
		i := g.rng.IntN(len(live))
		a := live[i]
		stream = append(stream, &histories[a][next[a]])
		next[a]++
		if next[a] == len(histories[a]) {
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
		}
	}
	return stream
}

// reorder swaps events with the next event of the same aggregate (which the
// processor holds, then drains).
func (g *gen) reorder(stream []*ev, histories [][]ev) {
	pos := make(map[*ev]int, len(stream))
	for i, e := range stream {
		pos[e] = i
	}
	for n := int(float64(g.o.Events) * g.o.Reorder); n > 0; n-- {
		i := g.rng.IntN(len(stream))
		e := stream[i]
		if e.version >= int64(len(histories[aggIndex(e.agg)])) {
			continue
		}
		nx := &histories[aggIndex(e.agg)][e.version] // version+1
		j := pos[nx]
		stream[i], stream[j] = stream[j], stream[i]
		pos[stream[i]], pos[stream[j]] = i, j
	}
}

// lateGaps moves events ~2000 positions later (or to the end): a gap filled
// late.
func (g *gen) lateGaps(stream []*ev) {
	for n := int(float64(g.o.Events) * g.o.LateGaps); n > 0; n-- {
		i := g.rng.IntN(len(stream))
		e := stream[i]
		to := min(i+2000+g.rng.IntN(2000), len(stream)-1)
		copy(stream[i:to], stream[i+1:to+1])
		stream[to] = e
	}
}

// inject encodes the stream, then puts duplicates and conflicts after their
// original, stale writers at the end and invalid records anywhere, noting
// the dead letters expected.
func (g *gen) inject(stream []*ev, exp *Expect) []Record {
	recs := make([]Record, 0, len(stream)*2)
	origAt := make(map[*ev]int, len(stream))
	for i, e := range stream {
		origAt[e] = i
		recs = append(recs, Record{Key: []byte(e.agg), Value: g.encode(e, false), Kind: KindEvent})
	}
	recs = g.injectRepeats(stream, recs, origAt, exp)
	// Stale writers at the end: a new id at a version already applied.
	for n := int(float64(g.o.Events) * g.o.Stale); n > 0; n-- {
		e := *stream[g.rng.IntN(len(stream))]
		e.id = fmt.Sprintf("stale-%d-%d", n, g.rng.IntN(1<<30))
		e.payload = map[string]any{"staleWriter": true}
		recs = append(recs, Record{Key: []byte(e.agg), Value: g.encode(&e, false), Kind: KindStale})
	}
	// Invalid records anywhere: each goes before a random position of the
	// stream as it is after the previous ones went in.
	var bad []insertion
	for n := int(float64(g.o.Events) * g.o.Invalid); n > 0; n-- {
		v, reason := g.invalid(n)
		bad = append(bad, insertion{g.rng.IntN(len(recs) + len(bad) + 1),
			Record{Key: []byte(fmt.Sprintf("bad-%d", n)), Value: v, Kind: KindInvalid}})
		exp.DeadLetterValues[string(v)] = reason
	}
	return insertInTurn(recs, bad)
}

// injectRepeats puts duplicates (some re-serialised) and conflicting reuses
// of event ids at random places after their original.
func (g *gen) injectRepeats(stream []*ev, recs []Record, origAt map[*ev]int, exp *Expect) []Record {
	rng := g.rng
	type placed struct {
		at int // insert before recs[at]
		r  Record
	}
	var ps []placed
	after := func(e *ev) int { i := origAt[e]; return i + 1 + rng.IntN(len(recs)-i) }
	for n := int(float64(g.o.Events) * g.o.Duplicates); n > 0; n-- {
		e := stream[rng.IntN(len(stream))]
		ps = append(ps, placed{after(e), Record{Key: []byte(e.agg), Value: g.encode(e, rng.Float64() < g.o.Reserialize), Kind: KindDuplicate}})
	}
	for n := int(float64(g.o.Events) * g.o.Conflicts); n > 0; n-- {
		orig := stream[rng.IntN(len(stream))]
		e := *orig
		e.payload = map[string]any{"conflicting": float64(rng.IntN(1 << 30))}
		v := g.encode(&e, false)
		ps = append(ps, placed{after(orig), Record{Key: []byte(e.agg), Value: v, Kind: KindConflict}})
		exp.DeadLetterValues[string(v)] = "conflict"
	}
	sort.SliceStable(ps, func(a, b int) bool { return ps[a].at < ps[b].at })
	merged := make([]Record, 0, len(recs)+len(ps))
	k := 0
	for i := 0; i <= len(recs); i++ {
		for k < len(ps) && ps[k].at == i {
			merged = append(merged, ps[k].r)
			k++
		}
		if i < len(recs) {
			merged = append(merged, recs[i])
		}
	}
	return merged
}

// insertion is a record to insert before position at of the stream as it is
// when its turn comes.
type insertion struct {
	at int
	r  Record
}

// insertInTurn returns recs with the insertions made one after another, in
// order, without moving the stream once per insertion: working backwards,
// each insertion takes the at-th slot of the result that later ones left
// free (the last one's slot is its at; an earlier one is pushed right by
// every later one at or before it), and recs fill the free slots in order.
func insertInTurn(recs []Record, ins []insertion) []Record {
	if len(ins) == 0 {
		return recs
	}
	out := make([]Record, len(recs)+len(ins))
	used := make([]bool, len(out))
	var taken []int // sorted slots of the later insertions
	for k := len(ins) - 1; k >= 0; k-- {
		// The at-th free slot x is the least x with x = at + |taken ≤ x|;
		// iterating from at climbs to it without passing it.
		x := ins[k].at
		for {
			nx := ins[k].at + sort.SearchInts(taken, x+1)
			if nx == x {
				break
			}
			x = nx
		}
		taken = slices.Insert(taken, sort.SearchInts(taken, x), x)
		out[x], used[x] = ins[k].r, true
	}
	i := 0
	for x := range out {
		if !used[x] {
			out[x] = recs[i]
			i++
		}
	}
	return out
}
