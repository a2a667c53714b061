package soak

import (
	"testing"

	"github.com/projector-dev/projector/sideeffects/effect"
)

// TestJudgeCalls: a replayed 2xx is the executor's fault unless an unknown
// attempt precedes it, and a request with no committed attempt is a call
// the ledger does not know of.
func TestJudgeCalls(t *testing.T) {
	unknown := effect.Attempt{Outcome: effect.OutcomeUnknown}
	ok := effect.Attempt{Outcome: effect.OutcomeSucceeded}
	for _, c := range []struct {
		name               string
		s                  keyStats
		e                  effect.Entry
		second, unrecorded bool
	}{
		{"one call", keyStats{requests: 1, applied: 1}, effect.Entry{Attempts: 1, History: []effect.Attempt{ok}}, false, false},
		{"replay after unknown", keyStats{requests: 2, applied: 1, replays: 1}, effect.Entry{Attempts: 2, History: []effect.Attempt{unknown, ok}}, false, false},
		{"replay after a learnt success", keyStats{requests: 2, applied: 1, replays: 1}, effect.Entry{Attempts: 2, History: []effect.Attempt{ok, ok}}, true, false},
		{"call without a start", keyStats{requests: 2, applied: 1, replays: 1}, effect.Entry{Attempts: 1, History: []effect.Attempt{unknown}}, false, true},
		{"killed before the request", keyStats{requests: 1, applied: 1}, effect.Entry{Attempts: 2, History: []effect.Attempt{unknown, ok}}, false, false},
	} {
		second, unrecorded := judgeCalls(&c.s, c.e)
		if second != c.second || unrecorded != c.unrecorded {
			t.Errorf("%s: second %v unrecorded %v, want %v %v", c.name, second, unrecorded, c.second, c.unrecorded)
		}
	}
}
