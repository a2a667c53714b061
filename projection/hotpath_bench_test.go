package projection_test

import (
	"strconv"
	"testing"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/envelope"
	"github.com/projector-dev/projector/internal/state"
	"github.com/projector-dev/projector/projection"
)

// BenchmarkPerEventPath is the processor's steady-state per-event work
// without Kafka: decode + fingerprint, dedup id, dedup check and mark, the
// guard (merge rule) – and, per 5000-event transaction, the changelog walk
// (Each + SplitKey) and the synced Pebble commit, amortised. Events are new
// and in order, over 10k aggregates; each pass over the prepared values uses
// another partition's keys so that no event repeats.
func BenchmarkPerEventPath(b *testing.B) {
	const (
		aggregates = 10_000
		versions   = 20
		txnSize    = 5000
	)
	st := openBenchStore(b)
	g := &projection.Guard{P: &projection.Projection{Name: "case-overview", Topic: "case-overview.v1", Handler: benchRules(), Versioned: true}, MaxHeld: 10000}
	d := dedup.NewStore(168 * 3600e9)
	vals := make([][]byte, 0, aggregates*versions)
	for v := int64(1); v <= versions; v++ {
		for a := range aggregates {
			vals = append(vals, benchValue("CASE-"+strconv.Itoa(100000+a), v))
		}
	}
	var (
		ev      envelope.Event
		prefix  []byte
		txn     = st.NewTxn()
		marks   dedup.Marks
		n, pass int
		keys    int
	)
	commit := func() {
		d.Stage(txn, &marks, prefix)
		txn.Each(func(key string, val []byte) {
			if _, _, err := state.SplitKey([]byte(key)); err != nil {
				b.Fatal(err)
			}
			keys++
		})
		if err := txn.Commit(); err != nil {
			b.Fatal(err)
		}
		txn = st.NewTxn()
	}
	b.ReportAllocs()
	for b.Loop() {
		k := n % len(vals)
		if k == 0 { // right after a commit: len(vals) is a multiple of txnSize
			pass++
			prefix = state.Task{Topic: "case-events", Partition: int32(pass)}.Prefix()
		}
		val := vals[k]
		if err := envelope.DecodeInto(val, 0, &ev); err != nil {
			b.Fatal(err)
		}
		fp := ev.Fingerprint()
		id := dedup.MakeID(ev.TenantID, ev.EventID)
		v, err := d.Check(txn, nil, prefix, id, fp, benchNow)
		if err != nil {
			b.Fatal(err)
		}
		if v != dedup.New {
			b.Fatalf("verdict %v", v)
		}
		d.Mark(txn, nil, &marks, prefix, int64(n), id, fp, benchNow)
		step, err := g.Offer(txn, prefix, &ev, projection.Source{Offset: int64(n), Value: val}, benchNow)
		if err != nil {
			b.Fatal(err)
		}
		if step.Outcome != projection.Applied {
			b.Fatalf("outcome %v", step.Outcome)
		}
		if n++; n%txnSize == 0 {
			commit()
		}
	}
	if keys == 0 && n >= txnSize {
		b.Fatal("no changelog keys")
	}
}
