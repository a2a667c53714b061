// Package workload generates seeded event streams with the faults projector
// exists to absorb (duplicates re-delivered at later offsets, some
// re-serialised; reordered versions; gaps filled late; stale writers;
// conflicting reuse of event ids; invalid records) together with the expected
// result, computed by a reference fold that shares no code with the processor.
// Tests, the demo and the benchmark use it.
package workload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
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

	// 1. Versions per aggregate: Events spread over Aggregates, each ≥ 1.
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

	// 2. Interleave aggregates, keeping each aggregate's order.
	var stream []*ev
	next := make([]int, len(histories))
	live := make([]int, 0, len(histories))
	for a := range histories {
		live = append(live, a)
	}
	for len(live) > 0 {
		i := rng.IntN(len(live))
		a := live[i]
		stream = append(stream, &histories[a][next[a]])
		next[a]++
		if next[a] == len(histories[a]) {
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
		}
	}

	// 3. Reorder: swap an event with the next event of the same aggregate.
	pos := make(map[*ev]int, len(stream))
	for i, e := range stream {
		pos[e] = i
	}
	for n := int(float64(o.Events) * o.Reorder); n > 0; n-- {
		i := rng.IntN(len(stream))
		e := stream[i]
		if e.version >= int64(len(histories[aggIndex(e.agg)])) {
			continue
		}
		nx := &histories[aggIndex(e.agg)][e.version] // version+1
		j := pos[nx]
		stream[i], stream[j] = stream[j], stream[i]
		pos[stream[i]], pos[stream[j]] = i, j
	}
	// 4. Late gaps: move an event ~2000 positions later (or to the end).
	for n := int(float64(o.Events) * o.LateGaps); n > 0; n-- {
		i := rng.IntN(len(stream))
		e := stream[i]
		to := min(i+2000+rng.IntN(2000), len(stream)-1)
		copy(stream[i:to], stream[i+1:to+1])
		stream[to] = e
	}

	// 5. Encode, then inject duplicates and conflicts after their original,
	// stale writers at the end and invalid records anywhere.
	recs := make([]Record, 0, len(stream)*2)
	origAt := make(map[*ev]int, len(stream))
	for i, e := range stream {
		origAt[e] = i
		recs = append(recs, Record{Key: []byte(e.agg), Value: g.encode(e, false), Kind: KindEvent})
	}
	exp := Expect{Final: map[string]Final{}, DeadLetters: map[string]int{}, DeadLetterValues: map[string]string{}}
	type placed struct {
		at int // insert before recs[at]
		r  Record
	}
	var ps []placed
	after := func(e *ev) int { i := origAt[e]; return i + 1 + rng.IntN(len(recs)-i) }
	for n := int(float64(o.Events) * o.Duplicates); n > 0; n-- {
		e := stream[rng.IntN(len(stream))]
		ps = append(ps, placed{after(e), Record{Key: []byte(e.agg), Value: g.encode(e, rng.Float64() < o.Reserialize), Kind: KindDuplicate}})
	}
	for n := int(float64(o.Events) * o.Conflicts); n > 0; n-- {
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
	recs = merged
	// Stale writers at the end: a new id at a version already applied.
	for n := int(float64(o.Events) * o.Stale); n > 0; n-- {
		e := *stream[rng.IntN(len(stream))]
		e.id = fmt.Sprintf("stale-%d-%d", n, rng.IntN(1<<30))
		e.payload = map[string]any{"staleWriter": true}
		recs = append(recs, Record{Key: []byte(e.agg), Value: g.encode(&e, false), Kind: KindStale})
	}
	// Invalid records anywhere: each goes before a random position of the
	// stream as it is after the previous ones went in.
	var bad []insertion
	for n := int(float64(o.Events) * o.Invalid); n > 0; n-- {
		v, reason := g.invalid(n)
		bad = append(bad, insertion{rng.IntN(len(recs) + len(bad) + 1),
			Record{Key: []byte(fmt.Sprintf("bad-%d", n)), Value: v, Kind: KindInvalid}})
		exp.DeadLetterValues[string(v)] = reason
	}
	recs = insertInTurn(recs, bad)
	// 6. The reference fold: simulate arrival per aggregate.
	type aggRef struct {
		version int64
		held    map[int64]bool
	}
	// The first record of each id; its intent is worked out only when the id
	// comes again (a tenth of the ids), which keeps the fold fast.
	type first struct {
		typ, agg string
		version  int64
		payload  json.RawMessage
	}
	seen := map[string]first{} // tenant|id → first record's intent fields
	refs := map[string]*aggRef{}
	for _, r := range recs {
		switch r.Kind {
		case KindInvalid:
			exp.Invalid++
			exp.DeadLetters[exp.DeadLetterValues[string(r.Value)]]++
			continue
		}
		var m struct {
			EventID string          `json:"eventId"`
			Agg     string          `json:"aggregateId"`
			Version int64           `json:"aggregateVersion"`
			Tenant  string          `json:"tenantId"`
			Payload json.RawMessage `json:"payload"`
			Type    string          `json:"eventType"`
		}
		if err := json.Unmarshal(r.Value, &m); err != nil {
			panic(err)
		}
		scope := m.Tenant + "|" + m.EventID
		if prev, ok := seen[scope]; ok {
			if intentOf(prev.typ, prev.agg, prev.version, prev.payload) == intentOf(m.Type, m.Agg, m.Version, m.Payload) {
				exp.Duplicates++
			} else {
				exp.Conflicts++
				exp.DeadLetters["conflict"]++
			}
			continue
		}
		seen[scope] = first{m.Type, m.Agg, m.Version, m.Payload}
		a := refs[m.Agg]
		if a == nil {
			a = &aggRef{held: map[int64]bool{}}
			refs[m.Agg] = a
		}
		switch {
		case m.Version <= a.version:
			exp.Stale++
		case m.Version == a.version+1:
			exp.Applied++
			a.version++
			for a.held[a.version+1] {
				delete(a.held, a.version+1)
				a.version++
				exp.Applied++
			}
		case a.held[m.Version]:
			exp.Stale++
		default:
			a.held[m.Version] = true
			exp.Held++
		}
	}
	// Final states: fold each full history in version order.
	for _, h := range histories {
		var st map[string]any
		deleted := false
		for _, e := range h {
			switch e.typ {
			case "CaseClosed":
				st, deleted = nil, true
			case "CaseNoted":
			default:
				if st == nil {
					st = map[string]any{}
				}
				deleted = false
				mergeInto(st, e.payload)
			}
		}
		if st == nil && !deleted {
			st = map[string]any{}
		}
		exp.Final[h[0].agg] = Final{Version: int64(len(h)), State: st, Deleted: deleted}
	}
	return recs, exp
}

// intentOf is the reference notion of "same intent": the six fingerprint
// fields compared as parsed JSON values (independent of the processor's
// RFC 8785 implementation).
func intentOf(typ, agg string, version int64, payload json.RawMessage) string {
	var p any
	_ = json.Unmarshal(payload, &p)
	b, _ := json.Marshal([]any{typ, agg, version, p})
	return string(b)
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

// encode writes an envelope. reserialise uses another member order, extra
// spacing, \u escapes and other number spellings (same intent, other bytes).
func (g *gen) encode(e *ev, reserialise bool) []byte {
	type kv struct {
		k string
		v any
	}
	members := []kv{{"eventId", e.id}, {"eventType", e.typ}, {"aggregateId", e.agg},
		{"aggregateType", g.o.AggregateType}, {"aggregateVersion", e.version}}
	if e.tenant != "" {
		members = append(members, kv{"tenantId", e.tenant})
	}
	members = append(members, kv{"occurredAt", "2026-06-28T10:15:30Z"}, kv{"producer", "workload"})
	if e.payload != nil {
		members = append(members, kv{"payload", e.payload})
	}
	var b bytes.Buffer
	b.Grow(320)
	sp := ""
	if reserialise {
		g.rng.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
		sp = " "
	}
	b.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			b.WriteString("," + sp)
		}
		writeJSON(&b, m.k, reserialise)
		b.WriteString(":" + sp)
		writeJSON(&b, m.v, reserialise)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// writeJSON writes v; alt spells it differently but equivalently.
func writeJSON(b *bytes.Buffer, v any, alt bool) {
	switch x := v.(type) {
	case string:
		if alt && len(x) > 0 && x[0] >= 'A' && x[0] <= 'Z' {
			fmt.Fprintf(b, `"\u%04x%s"`, x[0], escape(x[1:]))
			return
		}
		b.WriteString(`"` + escape(x) + `"`)
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		if alt && x == float64(int64(x)) {
			b.WriteString(strconv.FormatInt(int64(x), 10) + ".0")
			return
		}
		b.WriteString(strconv.FormatFloat(x, 'g', -1, 64))
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if alt {
			for i, j := 0, len(keys)-1; i < j; i, j = i+1, j-1 {
				keys[i], keys[j] = keys[j], keys[i]
			}
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
				if alt {
					b.WriteString("\n  ")
				}
			}
			writeJSON(b, k, false)
			b.WriteByte(':')
			writeJSON(b, x[k], alt)
		}
		b.WriteByte('}')
	case []string:
		b.WriteByte('[')
		for i, s := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSON(b, s, alt)
		}
		b.WriteByte(']')
	default:
		panic(fmt.Sprintf("workload: cannot encode %T", v))
	}
}

// escape is s as encoding/json writes it inside quotes. Most strings here
// need nothing, so they skip the marshal.
func escape(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return string(b[1 : len(b)-1])
		}
	}
	return s
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

// invalid returns the n-th malformed record and its expected reason.
func (g *gen) invalid(n int) ([]byte, string) {
	cases := []struct{ v, reason string }{
		{`not json at all %d`, "invalid:value"},
		{`[{"eventId":"x-%d"}]`, "invalid:value"},
		{`{"eventId":"inv-%d","eventType":"CaseUpdated","aggregateVersion":1}`, "invalid:aggregateId"},
		{`{"eventId":"","eventType":"CaseUpdated","aggregateId":"A-%d","aggregateVersion":1}`, "invalid:eventId"},
		{`{"eventId":"inv-%d","eventType":"CaseUpdated","aggregateId":"A","aggregateVersion":0}`, "invalid:aggregateVersion"},
		{`{"eventId":"inv-%d","eventType":"CaseUpdated","aggregateId":"A","aggregateVersion":1.5}`, "invalid:aggregateVersion"},
		{`{"eventId":"inv-%d","eventType":7,"aggregateId":"A","aggregateVersion":1}`, "invalid:eventType"},
		{`{"eventId":"inv-%d","eventType":"CaseUpdated","aggregateId":"A","aggregateVersion":"2"}`, "invalid:aggregateVersion"},
		{`{"eventId":"inv-%d","eventType":"CaseUpdated","aggregateId":"A","aggregateVersion":3`, "invalid:value"},
		{`{"eventType":"CaseUpdated","aggregateId":"A-%d","aggregateVersion":1}`, "invalid:eventId"},
	}
	c := cases[n%len(cases)]
	return []byte(fmt.Sprintf(c.v, n)), c.reason
}

// mergeInto applies an RFC 7386 merge patch (reference implementation).
func mergeInto(dst map[string]any, patch map[string]any) {
	for k, v := range patch {
		if v == nil {
			delete(dst, k)
			continue
		}
		if pm, ok := v.(map[string]any); ok {
			cur, _ := dst[k].(map[string]any)
			if cur == nil {
				cur = map[string]any{}
			}
			mergeInto(cur, pm)
			dst[k] = cur
			continue
		}
		dst[k] = v
	}
}
