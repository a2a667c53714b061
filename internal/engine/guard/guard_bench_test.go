package guard_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/engine/guard"
	"github.com/projector-dev/projector/projection"
)

var benchNow = time.Date(2026, 6, 28, 10, 15, 30, 0, time.UTC)

func benchRules() projection.Rules {
	return projection.Rules{
		"CaseOpened": projection.Merge, "CaseUpdated": projection.Merge,
		"CaseEscalated": projection.Merge, "CaseClosed": projection.Delete,
	}
}

// benchValue is a typical CaseUpdated envelope of the workload generator.
func benchValue(agg string, version int64) []byte {
	return fmt.Appendf(nil, `{"eventId":"%s-ev-%d","eventType":"CaseUpdated","aggregateId":%q,"aggregateType":"RegulatoryCase",`+
		`"aggregateVersion":%d,"occurredAt":"2026-06-28T10:15:30Z","producer":"workload","payload":{"owner":"user-%d","updates":%d}}`,
		agg, version, agg, version, version%50, version)
}

func openBenchStore(b *testing.B) *state.Store {
	b.Helper()
	st, err := state.Open(b.TempDir(), state.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return st
}

// BenchmarkGuardOffer offers in-order events (each the next version of one of
// 10k aggregates) to a versioned merge projection over a staged transaction
// on Pebble; every 5000 events the transaction commits (outside the timer).
func BenchmarkGuardOffer(b *testing.B) {
	const aggregates = 10_000
	st := openBenchStore(b)
	g := &guard.Guard{P: &projection.Projection{Name: "case-overview", Topic: "case-overview.v1", Handler: benchRules(), Versioned: true}, MaxHeld: 10000}
	prefix := state.Task{Topic: "case-events", Partition: 0}.Prefix()
	evs := make([]envelope.Event, aggregates)
	vals := make([][]byte, aggregates)
	for i := range evs {
		vals[i] = benchValue("CASE-"+strconv.Itoa(100000+i), 2)
		if err := envelope.DecodeInto(vals[i], 0, &evs[i]); err != nil {
			b.Fatal(err)
		}
		evs[i].AggregateVersion = 0
	}
	b.ReportAllocs()
	txn := st.NewTxn()
	n := 0
	for b.Loop() {
		ev := &evs[n%aggregates]
		ev.AggregateVersion++
		step, err := g.Offer(txn, prefix, ev, guard.Source{Offset: int64(n), Value: vals[n%aggregates]}, benchNow)
		if err != nil {
			b.Fatal(err)
		}
		if step.Outcome != guard.Applied || len(step.Changes) != 1 {
			b.Fatalf("outcome %v with %d changes, want applied", step.Outcome, len(step.Changes))
		}
		if n++; n%5000 == 0 {
			b.StopTimer()
			if err := txn.Commit(); err != nil {
				b.Fatal(err)
			}
			txn = st.NewTxn()
			b.StartTimer()
		}
	}
}

// BenchmarkMergePatch is the merge rule on a typical aggregate state.
func BenchmarkMergePatch(b *testing.B) {
	doc := []byte(`{"details":{"k1":"v3"},"owner":"user-12","priority":3,"status":"OPEN","title":"Case CASE-000123","updates":7}`)
	patch := []byte(`{"owner":"user-7","updates":8,"details":{"k2":"v8","drop":null}}`)
	b.SetBytes(int64(len(doc) + len(patch)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := projection.MergePatch(doc, patch); err != nil {
			b.Fatal(err)
		}
	}
}
