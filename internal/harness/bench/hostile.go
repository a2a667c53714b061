package bench

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strconv"

	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
)

// HostileKinds are the streams Hostile measures, valid first: each other
// stream is made entirely of one kind of bad input, and none may be slower
// than the valid one (a hostile producer must not be able to stall a
// partition more than ordinary traffic does).
var HostileKinds = []string{"valid", "invalid", "duplicate", "conflict", "held"}

// HostileOptions size Hostile.
type HostileOptions struct {
	Records    int // records per stream (default 100k)
	Partitions int // default 4
	Batch      int // max records per transaction (default 5000)
	// Dir holds the broker and the stores; "" makes a temporary one.
	Dir      string
	Progress io.Writer
	// Kinds overrides HostileKinds (the order they run in).
	Kinds []string
}

// HostileRate is one stream's measurement.
type HostileRate struct {
	Kind     string
	Records  int64
	Phase    Phase
	Outcomes map[string]int64
}

// Rate is input records per second.
func (h HostileRate) Rate() float64 {
	if h.Phase.Elapsed <= 0 {
		return 0
	}
	return float64(h.Records) / h.Phase.Elapsed.Seconds()
}

// Hostile runs the real processor, on one embedded broker and in one run,
// over a valid stream and over four hostile ones, each on its own topic
// with its own group and state:
//
//   - invalid: every record fails envelope validation (dead-lettered);
//   - duplicate: a small set of events, then every record a redelivery of
//     one of them (nothing emitted);
//   - conflict: the same small set, then every record reusing one of their
//     event ids with another payload (dead-lettered);
//   - held: every record the second version of a new aggregate whose first
//     never comes (parked, a changelog record each).
//
// The valid stream is the first version of n new aggregates, the held
// stream's shape with nothing missing. The duplicate and conflict streams
// include their originals (a hundredth of the records) in the measured
// time.
func Hostile(ctx context.Context, o HostileOptions) ([]HostileRate, error) {
	if o.Records <= 0 {
		o.Records = 100_000
	}
	if o.Partitions <= 0 {
		o.Partitions = 4
	}
	if o.Batch <= 0 {
		o.Batch = 5000
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	dir, b, stop, err := workBroker(o.Dir, "projector-hostile-", o.Partitions)
	if err != nil {
		return nil, err
	}
	defer stop()
	brokers := []string{b.Addr()}
	bo := Defaults()
	bo.Partitions, bo.Batch = o.Partitions, o.Batch
	var out []HostileRate
	kinds := o.Kinds
	if kinds == nil {
		kinds = HostileKinds
	}
	for i, kind := range kinds {
		recs := hostileStream(kind, o.Records)
		input := "hostile-" + strconv.Itoa(i) + "-" + kind // a kind may run twice
		if err := testkit.CreateTopic(ctx, brokers, input, int32(o.Partitions)); err != nil {
			return nil, err
		}
		if err := testkit.Produce(ctx, brokers, input, recs); err != nil {
			return nil, fmt.Errorf("bench: produce %s: %w", input, err)
		}
		ph, got, err := pipeline(ctx, bo, brokers, input, input, filepath.Join(dir, "state-"+input), int64(len(recs)))
		if err != nil {
			return nil, fmt.Errorf("bench: %s stream: %w", kind, err)
		}
		h := HostileRate{Kind: kind, Records: int64(len(recs)), Phase: ph, Outcomes: got}
		fmt.Fprintf(o.Progress, "%-9s %7d records in %6.2fs: %8.0f records/s\n", kind, h.Records, ph.Elapsed.Seconds(), h.Rate())
		out = append(out, h)
	}
	return out, nil
}

// hostileStream makes n records of one kind (see Hostile).
func hostileStream(kind string, n int) []workload.Record {
	recs := make([]workload.Record, 0, n)
	ev := func(id, agg string, v int, payload string) workload.Record {
		return workload.Record{Key: []byte(agg), Value: []byte(`{"eventId":"` + id + `","eventType":"CaseUpdated","aggregateType":"RegulatoryCase","aggregateId":"` +
			agg + `","aggregateVersion":` + strconv.Itoa(v) + `,"payload":{"status":"` + payload + `","n":` + strconv.Itoa(v) + `}}`)}
	}
	originals := max(n/100, 1)
	switch kind {
	case "valid":
		// The first version of n new aggregates: the held stream's shape
		// (one event per new aggregate), with nothing missing.
		for i := 0; i < n; i++ {
			recs = append(recs, ev("v-"+strconv.Itoa(i), "A-"+strconv.Itoa(i), 1, "open"))
		}
	case "invalid":
		bad := []string{`{"eventId":`, `not json`, `[]`, `{"eventId":"x","eventType":"CaseUpdated"}`,
			`{"eventId":"x","eventType":"CaseUpdated","aggregateId":"A","aggregateVersion":0}`,
			`{"eventId":"","eventType":"CaseUpdated","aggregateId":"A","aggregateVersion":1}`}
		for i := 0; i < n; i++ {
			recs = append(recs, workload.Record{Key: []byte("I-" + strconv.Itoa(i%1000)), Value: []byte(bad[i%len(bad)])})
		}
	case "duplicate", "conflict":
		for i := 0; i < originals; i++ {
			recs = append(recs, ev("o-"+strconv.Itoa(i), "O-"+strconv.Itoa(i), 1, "open"))
		}
		payload := "open"
		if kind == "conflict" {
			payload = "changed"
		}
		for i := 0; len(recs) < n; i++ {
			o := i % originals
			recs = append(recs, ev("o-"+strconv.Itoa(o), "O-"+strconv.Itoa(o), 1, payload))
		}
	case "held":
		for i := 0; i < n; i++ {
			recs = append(recs, ev("h-"+strconv.Itoa(i), "H-"+strconv.Itoa(i), 2, "open"))
		}
	default:
		panic("bench: unknown hostile stream " + kind)
	}
	return recs
}
