package processor_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/workload"
	"github.com/projector-dev/projector/processor"
)

// bigMerge is a CaseUpdated event for agg at version v whose payload merges
// a field of n bytes (a distinct field per version, so the state grows).
func bigMerge(agg string, v, n int) workload.Record {
	val := fmt.Sprintf(`{"eventId":"%s-%d","eventType":"CaseUpdated","aggregateId":"%s","aggregateType":"RegulatoryCase","aggregateVersion":%d,"payload":{"f%d":"%s"}}`,
		agg, v, agg, v, v, strings.Repeat("x", n))
	return workload.Record{Key: []byte(agg), Value: []byte(val)}
}

func header(r *kgo.Record, k string) string {
	for _, h := range r.Headers {
		if h.Key == k {
			return string(h.Value)
		}
	}
	return ""
}

// checkHeadersBounded fails if any header of the dead letters exceeds 1 KiB
// (plus the truncation mark).
func checkHeadersBounded(t *testing.T, recs []*kgo.Record) {
	t.Helper()
	for _, r := range recs {
		for _, h := range r.Headers {
			if len(h.Value) > 1<<10+64 {
				t.Errorf("dead letter at %d: header %s is %d bytes, want ≤ 1 KiB", r.Offset, h.Key, len(h.Value))
			}
		}
	}
}

// TestTooLargeOutputsDeadLettered is the repro: five 300 KB merges
// into one aggregate, then a small event for another. The worker keeps
// running, the small event is applied, the merge whose state outgrows
// kafka.maxRecordBytes is dead-lettered too-large and the later versions of
// the big aggregate are held behind it.
func TestTooLargeOutputsDeadLettered(t *testing.T) {
	e := newEnv(t, 1)
	var recs []workload.Record
	for v := 1; v <= 5; v++ {
		recs = append(recs, bigMerge("BIG-1", v, 300<<10))
	}
	recs = append(recs, bigMerge("SMALL-1", 1, 10))
	e.produce(recs)
	in := e.start(instOpts{})
	e.waitCaughtUp(60 * time.Second)
	select {
	case err := <-in.done:
		in.store.Close()
		t.Fatalf("the worker exited: %v", err)
	default:
	}
	st := in.p.Stats()
	if n := st.Events("case-overview", "held"); n != 1 {
		t.Errorf("%d held, want 1 (version 5 behind the dead-lettered version 4)", n)
	}
	if n := st.Events("case-overview", "too-large"); n != 1 {
		t.Errorf("%d too-large outcomes, want 1", n)
	}
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	latest := map[string]*kgo.Record{}
	for _, r := range e.read(projTopic) {
		latest[string(r.Key)] = r
	}
	if latest["SMALL-1"] == nil {
		t.Errorf("SMALL-1 not applied")
	}
	if r := latest["BIG-1"]; r == nil || !strings.Contains(string(r.Value), `"version":3`) {
		t.Errorf("BIG-1: want its projection at version 3 (the fourth merge is too large)")
	}
	dl := e.read(dlqTopic)
	checkHeadersBounded(t, dl)
	tooLarge := 0
	for _, r := range dl {
		if header(r, processor.HeaderReason) == "too-large" {
			tooLarge++
			if !strings.Contains(header(r, processor.HeaderError), "maxRecordBytes") {
				t.Errorf("projector-error %q does not name the limit", header(r, processor.HeaderError))
			}
		} else {
			t.Errorf("unexpected dead letter, reason %q", header(r, processor.HeaderReason))
		}
	}
	if tooLarge != 1 {
		t.Errorf("%d too-large dead letters, want 1 (version 4)", tooLarge)
	}
}
