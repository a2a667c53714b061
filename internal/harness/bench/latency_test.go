package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/harness/workload"
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

// TestOutputKeysTombstones: an unlisted type after a delete leaves the
// aggregate deleted, so the processor writes another tombstone; the input
// side ranks those events in version order (whatever the produce order)
// as the reader ranks the tombstones it reads, so that each is matched with
// its own event.
func TestOutputKeysTombstones(t *testing.T) {
	ev := func(v int, typ string) workload.Record {
		return workload.Record{Key: []byte("A"), Kind: workload.KindEvent,
			Value: fmt.Appendf(nil, `{"eventId":"A-%d","eventType":%q,"aggregateId":"A","aggregateVersion":%d}`, v, typ, v)}
	}
	// Produced out of order: version 3 before 2.
	recs := []workload.Record{ev(1, "CaseOpened"), ev(3, "CaseNoted"), ev(2, "CaseClosed"), ev(4, "CaseNoted"),
		ev(5, "CaseUpdated"), ev(6, "CaseNoted"), ev(7, "CaseClosed"),
		{Key: []byte("A"), Kind: workload.KindDuplicate, Value: []byte(`{"eventId":"A-1"}`)}}
	evs := make([]firstDelivery, len(recs))
	for i, r := range recs {
		if r.Kind == workload.KindEvent {
			if err := json.Unmarshal(r.Value, &evs[i]); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := outputKeys(recs, evs)
	want := []string{"A-1", "closed:A:2", "closed:A:1", "closed:A:3", "A-5", "A-6", "closed:A:4", ""}
	if !slices.Equal(got, want) {
		t.Fatalf("input keys %q, want %q", got, want)
	}
	// The processor's outputs in version order: value, three tombstones,
	// two values, a tombstone.
	rd := &reader{tombs: map[string]int{}}
	var read []string
	for _, v := range []string{`{"version":1,"state":{},"lastEventId":"A-1","lastEventType":"CaseOpened"}`, "", "", "",
		`{"version":5,"state":{"lastEventId":"x"},"lastEventId":"A-5","lastEventType":"CaseUpdated"}`,
		`{"version":6,"state":{},"lastEventId":"A-6","lastEventType":"CaseNoted"}`, ""} {
		rec := &kgo.Record{Key: []byte("A")}
		if v != "" {
			rec.Value = []byte(v)
		}
		read = append(read, rd.outputKey(rec))
	}
	if w := []string{"A-1", "closed:A:1", "closed:A:2", "closed:A:3", "A-5", "A-6", "closed:A:4"}; !slices.Equal(read, w) {
		t.Fatalf("output keys %q, want %q", read, w)
	}
}
