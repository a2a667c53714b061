package soak

import (
	"testing"
	"time"
)

func TestSummariseNearestRank(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	d := Summarise(ms(900, 100, 300, 200, 45000), 5*time.Second)
	if d.N != 5 || d.Min != 100*time.Millisecond || d.Median != 300*time.Millisecond ||
		d.P99 != 45*time.Second || d.Max != 45*time.Second || d.Over != 1 {
		t.Fatalf("got %+v", d)
	}
	if got := d.SamplesString(); got != "900ms 100ms 300ms 200ms 45s" {
		t.Fatalf("samples in the order taken: %q", got)
	}
	// 200 samples: p99 is the 198th smallest, not the maximum.
	var many []time.Duration
	for i := 1; i <= 200; i++ {
		many = append(many, time.Duration(i)*time.Millisecond)
	}
	if d := Summarise(many, 0); d.P99 != 198*time.Millisecond || d.Median != 100*time.Millisecond || d.Over != 0 {
		t.Fatalf("got p99 %s, median %s, over %d", d.P99, d.Median, d.Over)
	}
	if d := Summarise(nil, 0); d.N != 0 || d.String() != "no samples" {
		t.Fatalf("empty: %+v", d)
	}
}
