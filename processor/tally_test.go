package processor

import (
	"maps"
	"testing"
)

// TestTally checks that a batch's outcome counts reach Stats per
// (projection, outcome) however the adds interleave: the same pair again
// (by one and by n), another pair, a pair seen earlier, and n ≤ 0
// (nothing).
func TestTally(t *testing.T) {
	a, b := "case-overview", "case-list"
	// A name equal to a but not the same string: pairs compare by value.
	a2 := string([]byte("case-overview"))
	tl := newTally()
	tl.add(a, OutcomeApplied)
	tl.add(a, OutcomeApplied)
	tl.add(b, OutcomeApplied)
	tl.addN(b, OutcomeApplied, 3) // the pair the previous add found
	tl.add(a, OutcomeDuplicate)
	tl.add(a2, OutcomeApplied)
	tl.addN(a, OutcomeHeld, 0)
	tl.addN(a, OutcomeHeld, -2)
	tl.add("", OutcomeInvalid)
	tl.add(a, OutcomeDuplicate)

	s := newStats()
	s.addTally(&tl)
	s.addTally(&tl) // a second batch with the same counts adds up
	want := map[eventKey]int64{
		{a, OutcomeApplied}:   6,
		{b, OutcomeApplied}:   8,
		{a, OutcomeDuplicate}: 4,
		{"", OutcomeInvalid}:  2,
	}
	if !maps.Equal(s.events, want) {
		t.Fatalf("counts %v, want %v", s.events, want)
	}
	if n := len(tl.events); n != 4 {
		t.Fatalf("%d pairs in the batch's list, want 4 (one per pair): %v", n, tl.events)
	}
}
