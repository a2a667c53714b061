package processor_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/projection"
)

// TestStaleStoreGenuineEventApplied (docs/decisions/007): w1 applies v1 and
// holds v3 (event gap-3), then stops; its store last matched the changelog
// two days ago (its store clock). w2 takes the partition and dead-letters
// v3 on its gap timeout: the held key is deleted (a tombstone), and the
// tombstone is compacted away (delete.retention.ms 0, then 1 h). w1 comes
// back. A genuine v3 (another event id) and v2 arrive: v3 must be held and
// drained after v2, not dropped as a competing arrival of a held version
// that w1's stale store still holds ("first arrival wins").
func TestStaleStoreGenuineEventApplied(t *testing.T) {
	e := newEnv(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	old := func() time.Time { return time.Now().Add(-48 * time.Hour) }
	opts := instOpts{id: "w1", maxRecs: 300, policy: projection.DeadLetter, hold: time.Minute}

	w1, err := e.startWith(opts, state.Options{Now: old}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.produce([]workload.Record{gapEvent(1, "CaseUpdated", `{"v1":1}`), gapEvent(3, "CaseUpdated", `{"v3":1}`)})
	e.waitCaughtUp(time.Minute)
	if err := w1.stop(t); err != nil {
		t.Fatal(err)
	}

	var clock skewedClock
	clock.set(2 * time.Minute) // past v3's hold timeout
	w2 := e.start(instOpts{id: "w2", maxRecs: 300, policy: projection.DeadLetter, hold: time.Minute, now: clock.now})
	// The counter moves once the dead-letter transaction's Pebble write
	// landed (AsyncCommit), not at the Kafka commit.
	testkit.Await(t, time.Minute, "v3 dead-lettered by w2", func() bool { return w2.p.Stats().DeadLetters("gap-timeout") == 1 })
	if err := w2.stop(t); err != nil {
		t.Fatal(err)
	}

	// Compact the tombstones away, then give the changelog a retention
	// w1's store is older than.
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	changelog := processor.ChangelogTopic(group, inputTopic)
	setRetention := func(ms string) {
		t.Helper()
		resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "delete.retention.ms", Value: &ms}}, changelog)
		if err == nil {
			_, err = resp.On(changelog, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	setRetention("0")
	e.b.Cluster.Compact()
	tombstones := 0
	for _, r := range e.read(changelog) {
		if r.Value == nil {
			tombstones++
		}
	}
	if tombstones > 0 {
		t.Fatalf("setup: %d tombstones left in the changelog after compaction", tombstones)
	}
	setRetention(fmt.Sprint(time.Hour.Milliseconds()))

	w1, err = e.startWith(opts, state.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	genuine := gapEvent(3, "CaseUpdated", `{"v3b":1}`)
	genuine.Value = []byte(`{"eventId":"gap-3b"` + string(genuine.Value[len(`{"eventId":"gap-3"`):]))
	e.produce([]workload.Record{genuine})
	e.waitCaughtUp(time.Minute)
	e.produce([]workload.Record{gapEvent(2, "CaseUpdated", `{"v2":1}`)})
	e.waitCaughtUp(time.Minute)
	want := workload.Final{Version: 3, State: map[string]any{"v1": 1.0, "v2": 1.0, "v3b": 1.0}}
	var rep testkit.Report
	// On time out, the checks below say what is wrong.
	_ = testkit.WaitFor(context.Background(), 10*time.Second, func() bool {
		rep = testkit.CheckProjection(e.read(projTopic), map[string]workload.Final{"GAP-1": want})
		return rep.OK()
	})
	gaps := w1.p.Stats().Gaps()
	if err := w1.stop(t); err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("the genuine v3 was not applied after v2 (gaps %+v): %s", gaps, rep)
	}
}
