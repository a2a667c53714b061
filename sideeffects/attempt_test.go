package sideeffects

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestBackoff(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 40; n++ {
		ceil := BackoffCap
		if n <= 8 {
			ceil = BackoffBase << (n - 1)
		}
		var maxSeen time.Duration
		for range 200 {
			d := backoff(n, rng)
			if d < 0 || d > ceil {
				t.Fatalf("backoff(%d) = %v outside [0, %v]", n, d, ceil)
			}
			maxSeen = max(maxSeen, d)
		}
		// Full jitter spreads over the whole range.
		if maxSeen < ceil/2 {
			t.Fatalf("backoff(%d): max of 200 draws %v, ceiling %v", n, maxSeen, ceil)
		}
	}
	if d := backoff(0, nil); d < 0 || d > BackoffBase {
		t.Fatalf("backoff(0) = %v", d)
	}
	if d := backoff(1000, nil); d < 0 || d > BackoffCap {
		t.Fatalf("backoff(1000) = %v", d)
	}
}
