package processor

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/projection"
)

// countingRules is an EffectRules that makes one intent per event and
// counts its calls.
type countingRules struct{ calls int }

func (r *countingRules) Intents(projectionName string, ev *projection.Event, version int64) ([]projection.Intent, error) {
	r.calls++
	return []projection.Intent{{Effect: "notify", Key: fmt.Sprintf("%s/%s/%d", projectionName, ev.AggregateID, version)}}, nil
}

// TestRuleIntentsBuiltOncePerChange: in live mode the configured rules are
// evaluated once per applied change – the too-large check builds the
// intents and the step's records reuse them – and every applied change
// still produces its intent record.
func TestRuleIntentsBuiltOncePerChange(t *testing.T) {
	st, err := state.Open(t.TempDir(), storeOptions(0))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rules := &countingRules{}
	p, task, ts := directTask(t, st, rules)
	var intents []*kgo.Record
	bt := eos.NewTaskBatch(st, task, time.Now(), func(r *kgo.Record) {
		if r.Topic == "effects" {
			intents = append(intents, r)
		}
	})
	event := func(v int) *kgo.Record {
		return &kgo.Record{Key: []byte("CASE-1"), Value: fmt.Appendf(nil,
			`{"eventId":"ev-%d","eventType":"CaseUpdated","aggregateId":"CASE-1","aggregateType":"RegulatoryCase","aggregateVersion":%d,"payload":{"n":%d}}`, v, v, v)}
	}
	// Versions 2 and 3 are held; version 1 applies and drains them: one
	// step of three changes.
	for _, v := range []int{2, 3, 1} {
		if err := ts.Process(bt, event(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := bt.Commit(ts, ChangelogTopic(p.cfg.Group, "case-events")); err != nil {
		t.Fatal(err)
	}
	if len(intents) != 3 {
		t.Fatalf("%d intent records, want 3 (one per applied change)", len(intents))
	}
	for i, r := range intents {
		if want := fmt.Sprintf("case-overview/CASE-1/%d", i+1); string(r.Key) != want {
			t.Errorf("intent %d keyed %q, want %q", i, r.Key, want)
		}
	}
	if rules.calls != 3 {
		t.Errorf("rules evaluated %d times for 3 applied changes, want 3", rules.calls)
	}
}
