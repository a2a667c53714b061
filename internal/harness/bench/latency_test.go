package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestLatencyBenchSmall runs the latency benchmark at a small size, so that
// it cannot rot: one level at a given rate; every applied event produced
// after the warm-up has its projection record read and a latency, the
// latencies are ordered, and the report has the level's row. No latency
// threshold: the machine's load decides the figures.
func TestLatencyBenchSmall(t *testing.T) {
	o := DefaultLatencyOptions()
	o.Events, o.Aggregates = 2000, 200 // sets the events per aggregate only: Rate is given
	o.Rate, o.Loads = 2000, []int{50}
	o.Duration, o.Warmup = 3*time.Second, time.Second
	o.Partitions, o.Batch = 2, 500
	res, err := Latency(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Levels) != 1 || res.Max != nil || res.MaxRate != 2000 {
		t.Fatalf("levels %+v, max %v, rate %g", res.Levels, res.Max, res.MaxRate)
	}
	l := res.Levels[0]
	// About 1000 records/s for 2 s after the warm-up, nine in ten a first
	// delivery: far more than a few hundred, unless the window was cut.
	if l.Offered != 1000 || l.Records < 2500 || l.Expected < 500 {
		t.Fatalf("offered %g, %d records, %d expected in the window", l.Offered, l.Records, l.Expected)
	}
	if l.Matched != l.Expected || l.Read.N+l.Held.N != l.Expected || l.Stamp.N != l.Read.N || l.Read.N < l.Expected/2 {
		t.Fatalf("matched %d, read %d + held %d, stamp %d latencies; want %d (every applied event of the window), most applied on arrival",
			l.Matched, l.Read.N, l.Held.N, l.Stamp.N, l.Expected)
	}
	// The read latency is in ns from the produce call: positive. The stamp
	// latency has Kafka's 1 ms resolution: 0 is a latency under 1 ms.
	for _, s := range []struct {
		name    string
		st      LatencyStats
		minimum time.Duration
	}{{"read", l.Read, 1}, {"stamp", l.Stamp, 0}, {"held", l.Held, 1}} {
		if s.st.Min < s.minimum || s.st.P50 < s.st.Min || s.st.P99 < s.st.P50 || s.st.Max < s.st.P99 {
			t.Fatalf("%s latency: %+v", s.name, s.st)
		}
	}
	if l.Sent <= 0 || l.Achieved <= 0 || l.Txns <= 0 {
		t.Fatalf("level %+v", l)
	}
	var out bytes.Buffer
	res.Print(&out)
	if !strings.Contains(out.String(), "read p99") || !strings.Contains(out.String(), "50%") {
		t.Fatalf("report:\n%s", out.String())
	}
	t.Log("\n" + out.String())
}
