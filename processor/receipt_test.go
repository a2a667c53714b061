package processor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/receipt"
	"github.com/projector-dev/projector/internal/core/state"
)

// TestReceiptOutcomes: an ingested event gets one receipt with its outcome
// – applied by the projection that takes it, filtered when none does – and
// a redelivery (a duplicate) writes none.
func TestReceiptOutcomes(t *testing.T) {
	st, err := state.Open(t.TempDir(), storeOptions(0))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p, task, ts := directTaskWith(t, st, func(c *Config) {
		c.ReceiptsTopic = "receipts"
		c.Projections[0].AggregateTypes = []string{"RegulatoryCase"}
	})
	var got []*receipt.Receipt
	bt := eos.NewTaskBatch(st, task, time.Now(), func(r *kgo.Record) {
		if r.Topic != "receipts" {
			return
		}
		rc, err := receipt.Decode(r.Value)
		if err != nil {
			t.Fatalf("receipt %q: %v", r.Value, err)
		}
		got = append(got, rc)
	})
	ingested := func(id, typ string, index int) *kgo.Record {
		return &kgo.Record{Key: []byte("CASE-1"), Offset: int64(index),
			Headers: []kgo.RecordHeader{{Key: receipt.Header, Value: []byte(fmt.Sprintf(`{"key":"k","index":%d,"count":3}`, index))}},
			Value: []byte(`{"eventId":"` + id + `","eventType":"CaseOpened","aggregateId":"CASE-1","aggregateType":"` + typ +
				`","aggregateVersion":1,"payload":{}}`)}
	}
	for _, r := range []*kgo.Record{
		ingested("ev-1", "RegulatoryCase", 0),
		ingested("ev-2", "SomethingElse", 1),
		ingested("ev-1", "RegulatoryCase", 2), // a duplicate of ev-1
	} {
		if err := ts.Process(bt, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := bt.Commit(ts, ChangelogTopic(p.cfg.Group, "case-events")); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d receipts, want 2 (none for the duplicate)", len(got))
	}
	if rc := got[0]; rc.EventID != "ev-1" || rc.Outcome != "applied" || rc.Projections["case-overview"] != "applied" || rc.Index != 0 {
		t.Errorf("receipt of ev-1: %+v, want applied by case-overview", rc)
	}
	if rc := got[1]; rc.EventID != "ev-2" || rc.Outcome != "filtered" || len(rc.Projections) != 0 || rc.Index != 1 {
		t.Errorf("receipt of ev-2: %+v, want filtered, no projection", rc)
	}
}

// TestReceiptOfOversizeOriginNotWritten: an input record whose ingress
// header carries a key longer than the ingress accepts (so not written by
// the ingress) gets no receipt: the receipt repeats the key in its record
// key and value, and a 600 KB key made a 1.2 MB receipt, over the
// producer's batch limit (kafka.maxRecordBytes + 16 KiB), which would fail
// the transaction at every retry. The event itself is applied.
func TestReceiptOfOversizeOriginNotWritten(t *testing.T) {
	st, err := state.Open(t.TempDir(), storeOptions(0))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p, task, ts := directTaskWith(t, st, func(c *Config) { c.ReceiptsTopic = "receipts" })
	var receipts, applied int
	bt := eos.NewTaskBatch(st, task, time.Now(), func(r *kgo.Record) {
		switch r.Topic {
		case "receipts":
			receipts++
		case p.cfg.Projections[0].Topic:
			applied++
		}
	})
	origin := fmt.Sprintf(`{"key":"%s","index":0,"count":1}`, strings.Repeat("k", 600<<10))
	r := &kgo.Record{Key: []byte("CASE-1"), Headers: []kgo.RecordHeader{{Key: receipt.Header, Value: []byte(origin)}},
		Value: []byte(`{"eventId":"ev-1","eventType":"CaseOpened","aggregateId":"CASE-1","aggregateType":"RegulatoryCase","aggregateVersion":1,"payload":{}}`)}
	if err := ts.Process(bt, r); err != nil {
		t.Fatal(err)
	}
	if err := bt.Commit(ts, ChangelogTopic(p.cfg.Group, "case-events")); err != nil {
		t.Fatal(err)
	}
	if receipts != 0 || applied != 1 {
		t.Errorf("%d receipts, %d projection records; want none and one", receipts, applied)
	}
}
