package processor

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestGapSummaryMatchesIndex: the per-projection summary kept as the gap
// index changes (setGap, closeGap) equals a walk of the index, after every
// step of a random sequence of opens, moves and closes.
func TestGapSummaryMatchesIndex(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	ts := &taskState{gaps: map[gapKey]int64{}, sums: map[string]*gapSum{}}
	base := time.Unix(1_700_000_000, 0)
	projs := []string{"a", "b"}
	for step := range 20000 {
		k := gapKey{projs[rng.IntN(2)], "agg-" + string(rune('A'+rng.IntN(40)))}
		if rng.IntN(3) == 0 {
			ts.closeGap(k)
		} else {
			ts.setGap(k, base.Add(time.Duration(rng.IntN(1000_000))*time.Millisecond))
		}
		for _, p := range projs {
			n, oldest := ts.summary(p)
			wantN, wantOldest := 0, time.Time{}
			for gk, ms := range ts.gaps {
				if since := time.UnixMilli(ms); gk.projection == p {
					wantN++
					if wantOldest.IsZero() || since.Before(wantOldest) {
						wantOldest = since
					}
				}
			}
			if n != wantN || !oldest.Equal(wantOldest) {
				t.Fatalf("step %d, projection %s: summary %d since %v, index walk %d since %v", step, p, n, oldest, wantN, wantOldest)
			}
		}
	}
}
