package guard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/internal/harness/race"
	"github.com/projector-dev/projector/projection"
)

// recKV is a KV over a map that keeps the values it is given (as a
// *state.Txn does) and logs a copy of every write, so that a value changed
// after it was staged shows.
type recKV struct {
	m   map[string][]byte
	log []string
}

func newRecKV() *recKV { return &recKV{m: map[string][]byte{}} }

func (k *recKV) Get(key []byte) ([]byte, bool, error) { v, ok := k.m[string(key)]; return v, ok, nil }
func (k *recKV) Set(key, val []byte) {
	k.m[string(key)] = val
	k.log = append(k.log, fmt.Sprintf("set %q=%q", key, val))
}
func (k *recKV) Delete(key []byte) {
	delete(k.m, string(key))
	k.log = append(k.log, fmt.Sprintf("del %q", key))
}
func (k *recKV) Scan(prefix []byte, fn func(key, value []byte) error) error {
	var keys []string
	for s := range k.m {
		if strings.HasPrefix(s, string(prefix)) {
			keys = append(keys, s)
		}
	}
	slices.Sort(keys)
	for _, s := range keys {
		if err := fn([]byte(s), k.m[s]); err != nil {
			return err
		}
	}
	return nil
}

// stepString renders everything a step reports, byte for byte.
func stepString(s Step, offered *envelope.Event) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s held=%d since=%v changes=%v", s.Outcome, s.HeldCount, s.HeldSince, s.Changes == nil)
	for _, c := range s.Changes {
		fmt.Fprintf(&b, "\n  change offered=%v %+v %d %q %q v%d state=%q nil=%v del=%v fx=%v",
			c.Event == (*projection.Event)(offered), *c.Event, c.Source.Offset, c.Source.Key, c.Source.Value, c.Version, c.State, c.State == nil, c.Deleted, c.Effects)
	}
	for _, f := range s.Failures {
		fmt.Fprintf(&b, "\n  failure %d %q %q: %v", f.Source.Offset, f.Source.Key, f.Source.Value, f.Err)
	}
	for _, d := range s.Dropped {
		fmt.Fprintf(&b, "\n  dropped %d %q %q", d.Offset, d.Key, d.Value)
	}
	return b.String()
}

// reusingHandler is a Go handler that writes every new state into the same
// buffer (so the guard must copy it) and exercises every kind of result.
func reusingHandler() projection.Handler {
	var buf []byte
	return projection.HandlerFunc(func(state []byte, ev *projection.Event) (projection.Result, error) {
		switch ev.EventType {
		case "Fail":
			return projection.Result{}, errors.New("handler says no")
		case "Del":
			return projection.Result{Delete: true}, nil
		case "Note":
			return projection.Result{Keep: true, Effects: []projection.Intent{{Effect: "mail", Key: ev.EventID}}}, nil
		case "Echo":
			return projection.Result{State: state}, nil // the state it was given
		case "Empty":
			return projection.Result{State: []byte{}}, nil
		case "Nil":
			return projection.Result{}, nil
		}
		out, err := projection.MergePatch(state, ev.Payload)
		if err != nil {
			return projection.Result{}, err
		}
		buf = append(buf[:0], out...)
		return projection.Result{State: buf}, nil
	})
}

var diffPayloads = []string{`{"a":1}`, `{"b":{"c":2}}`, `{"a":null}`, `{"b":{"c":null,"d":[1]}}`, `null`, `[1]`, `{}`, `{"z":"\u00e9"}`, `"x"`}

// TestGuardMatchesReference runs random offers (in order, stale, held,
// draining, overflowing, failing, deleting, with Expire now and then)
// through the guard and through the previous implementation, over separate
// KVs, and compares every step, every write, and in the end what the KVs and
// the reported states hold.
func TestGuardMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	rounds := 400
	if testing.Short() {
		rounds = 50
	}
	types := []string{"Set", "Set", "Set", "Set", "Del", "Note", "Fail", "Echo", "Empty", "Nil"}
	for round := range rounds {
		// Every combination of versioned or not and the merge rule or a
		// handler of unknown code: three rounds in four versioned.
		versioned := round%4 != 3
		var h projection.Handler = projection.Rules{"Set": projection.Merge, "Del": projection.Delete, "Echo": projection.Merge, "Empty": projection.Merge, "Nil": projection.Merge}
		if (round/4)%2 == 1 {
			h = reusingHandler()
		}
		p := &projection.Projection{Name: "p", Topic: "p.v1", Handler: h, Versioned: versioned}
		// Held events under their own keys, as the reference stores them
		// (TestGuardInlineHeldMatchesKeyed compares the inline slot).
		g := &Guard{P: p, MaxHeld: int64(1 + r.IntN(4)), InlineHeldBytes: -1}
		// The reference runs the previous rules and merge: the guard's
		// merge fast path is compared with them, not with itself.
		refP := *p
		if rules, ok := h.(projection.Rules); ok {
			refP.Handler = refRules(rules)
		}
		ref := (*refGuard)(&Guard{P: &refP, MaxHeld: g.MaxHeld})
		held := map[string]int64{} // each aggregate's held count after the last step
		checkHeldBefore := func(what string, i int, agg string, s Step) {
			t.Helper()
			if s.HeldBefore != held[agg] {
				t.Fatalf("round %d %s %d: HeldBefore %d, want %d (held after the previous step)", round, what, i, s.HeldBefore, held[agg])
			}
			held[agg] = s.HeldCount
		}
		kv, refKV := newRecKV(), newRecKV()
		prefix := []byte("task/")
		cur := map[string]int64{}
		now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
		type reported struct {
			state []byte
			copy  string
		}
		var seen []reported
		for i := range 40 {
			now = now.Add(time.Duration(r.IntN(3000)) * time.Millisecond)
			agg := []string{"A", "B"}[r.IntN(2)]
			if r.IntN(12) == 0 {
				pol := []projection.Policy{projection.Wait, projection.Skip, projection.DeadLetter}[r.IntN(3)]
				s1, err1 := g.Expire(kv, prefix, agg, pol, now, 0) // the reference has no hold
				s2, err2 := ref.Expire(refKV, prefix, agg, pol, now)
				if fmt.Sprint(err1) != fmt.Sprint(err2) || stepString(s1, nil) != stepString(s2, nil) {
					t.Fatalf("round %d expire %d: step\n%s (%v)\nreference\n%s (%v)", round, i, stepString(s1, nil), err1, stepString(s2, nil), err2)
				}
				if err1 == nil && pol != projection.Wait { // projection.Wait does nothing and reports no gap
					checkHeldBefore("expire", i, agg, s1)
				}
				continue
			}
			v := cur[agg] + int64([]int{-1, 0, 1, 1, 1, 1, 2, 3}[r.IntN(8)])
			if v < 1 {
				v = 1
			}
			typ := types[r.IntN(len(types))]
			payload := diffPayloads[r.IntN(len(diffPayloads))]
			raw := fmt.Sprintf(`{"eventId":"e%d","eventType":%q,"aggregateId":%q,"aggregateVersion":%d,"payload":%s}`, i, typ, agg, v, payload)
			ev, err := envelope.Decode([]byte(raw), 0)
			if err != nil {
				t.Fatal(err)
			}
			src := Source{Offset: int64(i), Key: []byte(agg), Value: []byte(raw)}
			s1, err1 := g.Offer(kv, prefix, ev, src, now)
			s2, err2 := ref.Offer(refKV, prefix, ev, src, now)
			if fmt.Sprint(err1) != fmt.Sprint(err2) || stepString(s1, ev) != stepString(s2, ev) {
				t.Fatalf("round %d offer %d (%s v%d %s): step\n%s (%v)\nreference\n%s (%v)", round, i, typ, v, payload, stepString(s1, ev), err1, stepString(s2, ev), err2)
			}
			if err1 == nil {
				checkHeldBefore("offer", i, agg, s1)
			}
			if !slices.Equal(kv.log, refKV.log) {
				t.Fatalf("round %d offer %d: writes\n%s\nreference\n%s", round, i, strings.Join(kv.log, "\n"), strings.Join(refKV.log, "\n"))
			}
			for _, c := range s1.Changes {
				seen = append(seen, reported{c.State, string(c.State)})
				if c.Version > cur[agg] {
					cur[agg] = c.Version
				}
			}
			if !versioned && len(s1.Changes) > 0 {
				cur[agg] = s1.Changes[len(s1.Changes)-1].Version
			}
		}
		// Nothing staged or reported changed afterwards.
		for k, val := range kv.m {
			if !bytes.Equal(val, refKV.m[k]) {
				t.Fatalf("round %d: %q holds %q, reference %q", round, k, val, refKV.m[k])
			}
		}
		if len(kv.m) != len(refKV.m) {
			t.Fatalf("round %d: %d keys, reference %d", round, len(kv.m), len(refKV.m))
		}
		last := map[string]string{}
		for _, l := range kv.log {
			if k, v, ok := strings.Cut(l, "="); ok {
				last[k] = v
			}
		}
		for k, val := range kv.m {
			if want := last[fmt.Sprintf("set %q", k)]; fmt.Sprintf("%q", val) != want {
				t.Fatalf("round %d: %q changed after it was staged: %q, staged %s", round, k, val, want)
			}
		}
		for _, s := range seen {
			if string(s.state) != s.copy {
				t.Fatalf("round %d: a reported state changed: %q, was %q", round, s.state, s.copy)
			}
		}
	}
}

// TestGuardOfferAllocs: the usual offer (the next version, nothing held, a
// merge into a small state) allocates the offer's scratch (key and change)
// and the staged record, nothing else.
func TestGuardOfferAllocs(t *testing.T) {
	if race.Enabled {
		t.Skip("the race detector makes sync.Pool drop buffers")
	}
	g := &Guard{P: &projection.Projection{Name: "case-overview", Handler: projection.Rules{"CaseUpdated": projection.Merge, "CaseClosed": projection.Delete}, Versioned: true}}
	kv := newAllocKV()
	prefix := []byte("t\x00\x0bcase-events\x00\x00\x00\x00")
	raw := []byte(`{"eventId":"e","eventType":"CaseUpdated","aggregateId":"CASE-100001","aggregateVersion":1,"payload":{"owner":"user-7","updates":8,"details":{"k2":"v8","drop":null}}}`)
	ev, err := envelope.Decode(raw, 0)
	if err != nil {
		t.Fatal(err)
	}
	src := Source{Offset: 1, Value: raw}
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	if _, err := g.Offer(kv, prefix, ev, src, now); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		ev.AggregateVersion++
		step, err := g.Offer(kv, prefix, ev, src, now)
		if err != nil || step.Outcome != Applied || len(step.Changes) != 1 {
			t.Fatalf("%+v %v", step, err)
		}
	})
	if allocs > 2 {
		t.Fatalf("%v allocations per offer, want 2", allocs)
	}
	for _, c := range []struct {
		typ     string
		deleted bool
	}{{"Note", false}, {"CaseClosed", true}} { // kept as is; deleted
		ev.EventType = c.typ
		allocs := testing.AllocsPerRun(100, func() {
			ev.AggregateVersion++
			step, err := g.Offer(kv, prefix, ev, src, now)
			if err != nil || step.Outcome != Applied || step.Changes[0].Deleted != c.deleted {
				t.Fatalf("%s: %+v %v", c.typ, step, err)
			}
		})
		if allocs > 2 {
			t.Fatalf("%s: %v allocations per offer, want 2", c.typ, allocs)
		}
	}
}

// allocKV is a KV that allocates nothing for keys it already has.
type allocKV struct {
	index map[string]int
	vals  [][]byte
}

func newAllocKV() *allocKV { return &allocKV{index: map[string]int{}} }

func (k *allocKV) Get(key []byte) ([]byte, bool, error) {
	if i, ok := k.index[string(key)]; ok && k.vals[i] != nil {
		return k.vals[i], true, nil
	}
	return nil, false, nil
}

func (k *allocKV) Set(key, val []byte) {
	if i, ok := k.index[string(key)]; ok {
		k.vals[i] = val
		return
	}
	k.index[string(key)] = len(k.vals)
	k.vals = append(k.vals, val)
}

func (k *allocKV) Delete(key []byte) {
	if i, ok := k.index[string(key)]; ok {
		k.vals[i] = nil
	}
}

func (k *allocKV) Scan([]byte, func(key, value []byte) error) error { return nil }

// heldSet is an aggregate's state as the guard reports it, with its held
// events wherever they are stored (inline or under their keys).
func heldSet(t *testing.T, g *Guard, kv KV, prefix []byte, agg string) string {
	t.Helper()
	snap, ok, err := g.Inspect(kv, prefix, agg)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return "none"
	}
	out := fmt.Sprintf("v%d del=%v held=%d since=%v state=%q", snap.Version, snap.Deleted, snap.HeldCount, snap.HeldSince, snap.State)
	var held []string
	if h := snap.Inline; h != nil {
		held = append(held, fmt.Sprintf("v%d@%v:%d:%q", h.Version, h.At, h.Source.Offset, h.Source.Value))
	}
	hp := HeldPrefix(prefix, g.P.Name, agg)
	err = kv.Scan(hp, func(k, v []byte) error {
		at, src, err := DecodeHeld(v)
		if err != nil {
			return err
		}
		held = append(held, fmt.Sprintf("v%d@%v:%d:%q", binary.BigEndian.Uint64(k[len(hp):]), at, src.Offset, src.Value))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(held)
	if int64(len(held)) != snap.HeldCount {
		t.Fatalf("%s: held count %d, but %d held events stored: %v", agg, snap.HeldCount, len(held), held)
	}
	return out + " " + strings.Join(held, ",")
}

// TestGuardInlineHeldMatchesKeyed runs random offers (held, draining,
// stale, overflowing, failing, with Expire under every policy and with a
// stop now and then, and events too large for the slot) through a guard that
// keeps an aggregate's first held event in its record and through one that
// keeps every held event under its own key. Where they are stored is all
// that may differ: every step, every reported state, and after every step
// each aggregate's version, state, held count and held events (with their
// sources and times) are the same.
func TestGuardInlineHeldMatchesKeyed(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	// One goroutine: the race detector has nothing to find here, so under
	// -race it runs a quarter of the rounds (13 s of CPU at 400); .ci/run
	// runs all 400 without it.
	rounds := 400
	if race.Enabled {
		rounds = 100
	}
	if testing.Short() {
		rounds = 50
	}
	types := []string{"Set", "Set", "Set", "Set", "Del", "Note", "Fail", "Echo", "Big"}
	inlined, keyedToo := 0, 0 // steps after which the inline guard had an inline event, and keyed ones beside it
	for round := range rounds {
		h := projection.Rules{"Set": projection.Merge, "Del": projection.Delete, "Echo": projection.Merge, "Big": projection.Merge}
		p := &projection.Projection{Name: "p", Topic: "p.v1", Handler: h, Versioned: true}
		maxHeld := int64(2 + r.IntN(6))
		inl := &Guard{P: p, MaxHeld: maxHeld, InlineHeldBytes: 300}
		keyed := &Guard{P: p, MaxHeld: maxHeld, InlineHeldBytes: -1}
		kvI, kvK := newRecKV(), newRecKV()
		prefix := []byte("task/")
		cur := map[string]int64{}
		now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
		for i := range 60 {
			now = now.Add(time.Duration(r.IntN(3000)) * time.Millisecond)
			agg := []string{"A", "B", "C"}[r.IntN(3)]
			var s1, s2 Step
			var err1, err2 error
			what := ""
			if r.IntN(10) == 0 {
				pol := []projection.Policy{projection.Wait, projection.Skip, projection.DeadLetter}[r.IntN(3)]
				var stop int64
				if pol == projection.Skip && r.IntN(3) == 0 {
					stop = cur[agg] + int64(1+r.IntN(4))
				}
				what = fmt.Sprintf("expire %v stop %d", pol, stop)
				s1, err1 = inl.ExpireBefore(kvI, prefix, agg, pol, now, 0, stop)
				s2, err2 = keyed.ExpireBefore(kvK, prefix, agg, pol, now, 0, stop)
			} else {
				v := cur[agg] + int64([]int{-1, 0, 1, 1, 1, 2, 2, 3, 4}[r.IntN(9)])
				v = max(v, 1)
				typ := types[r.IntN(len(types))]
				payload := diffPayloads[r.IntN(len(diffPayloads))]
				if typ == "Big" {
					payload = `{"big":"` + strings.Repeat("x", 200+r.IntN(200)) + `"}` // around the slot's 300 bytes
				}
				raw := fmt.Sprintf(`{"eventId":"e%d","eventType":%q,"aggregateId":%q,"aggregateVersion":%d,"payload":%s}`, i, typ, agg, v, payload)
				ev, err := envelope.Decode([]byte(raw), 0)
				if err != nil {
					t.Fatal(err)
				}
				src := Source{Offset: int64(i), Key: []byte(agg), Value: []byte(raw)}
				what = fmt.Sprintf("offer %s v%d", typ, v)
				if r.IntN(8) == 0 {
					what += " holding back"
					s1, err1 = inl.OfferHoldingBack(kvI, prefix, ev, src, now)
					s2, err2 = keyed.OfferHoldingBack(kvK, prefix, ev, src, now)
				} else {
					s1, err1 = inl.Offer(kvI, prefix, ev, src, now)
					s2, err2 = keyed.Offer(kvK, prefix, ev, src, now)
				}
			}
			if fmt.Sprint(err1) != fmt.Sprint(err2) || stepString(s1, nil) != stepString(s2, nil) {
				t.Fatalf("round %d %d %s: inline\n%s (%v)\nkeyed\n%s (%v)", round, i, what, stepString(s1, nil), err1, stepString(s2, nil), err2)
			}
			for _, c := range s1.Changes {
				cur[agg] = max(cur[agg], c.Version)
			}
			for _, a := range []string{"A", "B", "C"} {
				if snap, _, _ := inl.Inspect(kvI, prefix, a); snap.Inline != nil {
					inlined++
					if snap.HeldCount > 1 {
						keyedToo++
					}
				}
				if x, y := heldSet(t, inl, kvI, prefix, a), heldSet(t, keyed, kvK, prefix, a); x != y {
					t.Fatalf("round %d %d %s: aggregate %s\ninline %s\nkeyed  %s", round, i, what, a, x, y)
				}
			}
		}
	}
	if inlined == 0 || keyedToo == 0 {
		t.Fatalf("the streams never exercised the slot: %d states with an inline event, %d of them with keyed ones too", inlined, keyedToo)
	}
	t.Logf("%d states with an inline held event, %d of them with keyed ones beside it", inlined, keyedToo)
}
