package guard_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/engine/guard"
	"github.com/projector-dev/projector/projection"
)

var t0 = time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)

func newTxn(t *testing.T) *state.Txn {
	t.Helper()
	st, err := state.Open("mem", state.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st.NewTxn()
}

var prefix = state.Task{Topic: "in", Partition: 0}.Prefix()

func event(t *testing.T, typ string, v int64, payload string) (*envelope.Event, guard.Source) {
	t.Helper()
	raw := fmt.Sprintf(`{"eventId":"e%d-%s","eventType":%q,"aggregateId":"A","aggregateVersion":%d,"payload":%s}`, v, typ, typ, v, payload)
	ev, err := envelope.Decode([]byte(raw), 0)
	if err != nil {
		t.Fatal(err)
	}
	return ev, guard.Source{Offset: v, Value: []byte(raw)}
}

func newGuard(versioned bool, maxHeld int64) *guard.Guard {
	return &guard.Guard{P: &projection.Projection{Name: "p", Topic: "p.v1", Versioned: versioned,
		Handler: projection.Rules{"Set": projection.Merge, "Del": projection.Delete}}, MaxHeld: maxHeld}
}

type offer struct {
	typ     string
	version int64
	payload string
	want    guard.Outcome
	applied []int64 // versions applied by this offer, in order
}

// TestGuardOutcomes walks the version guard through in-order, stale, held,
// drained, competing and overflowing events
// (docs/design.md#one-order-per-aggregate).
func TestGuardOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		offers []offer
		final  int64
		state  string
	}{
		{"in order", []offer{
			{"Set", 1, `{"a":1}`, guard.Applied, []int64{1}},
			{"Set", 2, `{"b":2}`, guard.Applied, []int64{2}},
		}, 2, `{"a":1,"b":2}`},
		{"stale", []offer{
			{"Set", 1, `{"a":1}`, guard.Applied, []int64{1}},
			{"Set", 1, `{"a":9}`, guard.Stale, nil},
		}, 1, `{"a":1}`},
		{"gap then drain in order", []offer{
			{"Set", 1, `{"a":1}`, guard.Applied, []int64{1}},
			{"Set", 4, `{"d":4}`, guard.Held, nil},
			{"Set", 3, `{"c":3}`, guard.Held, nil},
			{"Set", 2, `{"b":2}`, guard.Applied, []int64{2, 3, 4}},
		}, 4, `{"a":1,"b":2,"c":3,"d":4}`},
		{"competing event for a held version is stale", []offer{
			{"Set", 3, `{"c":3}`, guard.Held, nil},
			{"Set", 3, `{"c":"other"}`, guard.Stale, nil},
		}, 0, ``},
		{"held limit overflows", []offer{
			{"Set", 3, `{}`, guard.Held, nil},
			{"Set", 4, `{}`, guard.Held, nil},
			{"Set", 5, `{}`, guard.Overflow, nil},
		}, 0, ``},
		{"delete then merge starts from empty", []offer{
			{"Set", 1, `{"a":1}`, guard.Applied, []int64{1}},
			{"Del", 2, `null`, guard.Applied, []int64{2}},
			{"Set", 3, `{"z":3}`, guard.Applied, []int64{3}},
		}, 3, `{"z":3}`},
		{"unlisted type advances the version only", []offer{
			{"Set", 1, `{"a":1}`, guard.Applied, []int64{1}},
			{"Note", 2, `{"ignored":true}`, guard.Applied, []int64{2}},
		}, 2, `{"a":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kv := newTxn(t)
			g := newGuard(true, 2)
			for i, o := range tc.offers {
				ev, src := event(t, o.typ, o.version, o.payload)
				step, err := g.Offer(kv, prefix, ev, src, t0)
				if err != nil {
					t.Fatal(err)
				}
				if step.Outcome != o.want {
					t.Fatalf("offer %d (v%d): outcome %s, want %s", i, o.version, step.Outcome, o.want)
				}
				var got []int64
				for _, c := range step.Changes {
					got = append(got, c.Version)
				}
				if fmt.Sprint(got) != fmt.Sprint(o.applied) {
					t.Fatalf("offer %d (v%d): applied %v, want %v", i, o.version, got, o.applied)
				}
			}
			snap, _, err := g.Inspect(kv, prefix, "A")
			if err != nil {
				t.Fatal(err)
			}
			if snap.Version != tc.final || (tc.state != "" && string(snap.State) != tc.state) {
				t.Fatalf("final v%d %s, want v%d %s", snap.Version, snap.State, tc.final, tc.state)
			}
		})
	}
}

// TestGuardDeleteKeepsTombstoneUnderUnlistedTypes: an unlisted event after a
// delete leaves the aggregate deleted (a tombstone again), version advanced.
func TestGuardDeleteKeepsTombstoneUnderUnlistedTypes(t *testing.T) {
	kv, g := newTxn(t), newGuard(true, 10)
	for _, o := range []offer{{"Set", 1, `{"a":1}`, 0, nil}, {"Del", 2, `null`, 0, nil}, {"Note", 3, `{}`, 0, nil}} {
		ev, src := event(t, o.typ, o.version, o.payload)
		step, err := g.Offer(kv, prefix, ev, src, t0)
		if err != nil {
			t.Fatal(err)
		}
		if o.version >= 2 && !step.Changes[0].Deleted {
			t.Fatalf("v%d: want a deletion (tombstone)", o.version)
		}
	}
}

// TestGuardHandlerErrorDoesNotAdvance: a failing handler dead-letters the
// event and later versions wait behind it.
func TestGuardHandlerErrorDoesNotAdvance(t *testing.T) {
	kv := newTxn(t)
	boom := errors.New("boom")
	g := &guard.Guard{P: &projection.Projection{Name: "p", Versioned: true,
		Handler: projection.HandlerFunc(func(s []byte, ev *projection.Event) (projection.Result, error) {
			if ev.AggregateVersion == 2 {
				return projection.Result{}, boom
			}
			return projection.Result{State: s}, nil
		})}}
	for _, v := range []int64{1, 3, 2} {
		ev, src := event(t, "Set", v, `{}`)
		step, err := g.Offer(kv, prefix, ev, src, t0)
		if err != nil {
			t.Fatal(err)
		}
		if v == 2 && (step.Outcome != guard.Failed || len(step.Failures) != 1 || !errors.Is(step.Failures[0].Err, boom)) {
			t.Fatalf("v2: %+v", step)
		}
	}
	snap, _, _ := g.Inspect(kv, prefix, "A")
	if snap.Version != 1 || snap.HeldCount != 1 {
		t.Fatalf("want version 1 with v3 held, got v%d held %d", snap.Version, snap.HeldCount)
	}
}

// TestGuardUnversioned applies in arrival order and counts versions.
func TestGuardUnversioned(t *testing.T) {
	kv, g := newTxn(t), newGuard(false, 10)
	for i, v := range []int64{5, 2, 9} {
		ev, src := event(t, "Set", v, fmt.Sprintf(`{"v":%d}`, v))
		step, err := g.Offer(kv, prefix, ev, src, t0)
		if err != nil || step.Outcome != guard.Applied || step.Changes[0].Version != int64(i+1) {
			t.Fatalf("offer %d: %+v %v", i, step, err)
		}
	}
}

// TestGuardExpireSkipWaitsAgainForTheNextGap: after a skip, a remaining gap
// gets a full hold timeout of its own (a regression: it inherited the
// expired start time and was skipped at once).
func TestGuardExpireSkipWaitsAgainForTheNextGap(t *testing.T) {
	kv, g := newTxn(t), newGuard(true, 100)
	for _, v := range []int64{1, 5, 9} {
		ev, src := event(t, "Set", v, `{}`)
		if _, err := g.Offer(kv, prefix, ev, src, t0); err != nil {
			t.Fatal(err)
		}
	}
	later := t0.Add(5 * time.Minute)
	step, err := g.Expire(kv, prefix, "A", projection.Skip, later, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(step.Changes) != 1 || step.Changes[0].Version != 5 {
		t.Fatalf("skip applied %+v, want v5", step.Changes)
	}
	if step.HeldCount != 1 || !step.HeldSince.Equal(later.Truncate(time.Millisecond)) {
		t.Fatalf("after skip: held %d since %v, want 1 since %v", step.HeldCount, step.HeldSince, later)
	}
	// The remaining gap is younger than the hold: left alone, and reported.
	step, err = g.Expire(kv, prefix, "A", projection.Skip, later.Add(4*time.Minute), 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(step.Changes)+len(step.Dropped)+len(step.Failures) != 0 || step.HeldBefore != 1 || step.HeldCount != 1 ||
		!step.HeldSince.Equal(later.Truncate(time.Millisecond)) {
		t.Fatalf("a gap younger than the hold: %+v, want it reported as it is (1 held since %v)", step, later)
	}
}

// TestGuardExpireBeforeLeavesOutTheStop: a skip with a stop applies the
// held versions below it, removes the stop's held event unapplied and
// leaves the versions after it held behind it; a stop at the first held
// version applies nothing.
func TestGuardExpireBeforeLeavesOutTheStop(t *testing.T) {
	kv, g := newTxn(t), newGuard(true, 100)
	for _, v := range []int64{1, 3, 4, 5, 6} {
		ev, src := event(t, "Set", v, `{}`)
		if _, err := g.Offer(kv, prefix, ev, src, t0); err != nil {
			t.Fatal(err)
		}
	}
	step, err := g.ExpireBefore(kv, prefix, "A", projection.Skip, t0.Add(time.Hour), 0, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(step.Changes) != 2 || step.Changes[0].Version != 3 || step.Changes[1].Version != 4 || step.HeldCount != 1 {
		t.Fatalf("stop 5: applied %+v, %d held; want 3 and 4 applied, 6 held", step.Changes, step.HeldCount)
	}
	snap, _, _ := g.Inspect(kv, prefix, "A")
	if snap.Version != 4 {
		t.Fatalf("stop 5: version %d, want 4", snap.Version)
	}
	// Version 6 is now the first held; a stop there applies nothing.
	step, err = g.ExpireBefore(kv, prefix, "A", projection.Skip, t0.Add(2*time.Hour), 0, 6)
	if err != nil {
		t.Fatal(err)
	}
	if len(step.Changes) != 0 || step.HeldCount != 0 {
		t.Fatalf("stop 6: applied %+v, %d held; want none of either", step.Changes, step.HeldCount)
	}
	if snap, _, _ = g.Inspect(kv, prefix, "A"); snap.Version != 5 {
		t.Fatalf("stop 6: version %d, want 5 (the skip ends in front of 6)", snap.Version)
	}
	// Version 6 (left out) never comes back: version 7 applies in order.
	ev, src := event(t, "Set", 7, `{}`)
	if step, _ = g.Offer(kv, prefix, ev, src, t0); step.Outcome != guard.Held {
		t.Fatalf("v7 after a stop at 6: %v, want held behind the missing 6", step.Outcome)
	}
}

// TestGuardExpireDeadLetter drops every held event with its source.
func TestGuardExpireDeadLetter(t *testing.T) {
	kv, g := newTxn(t), newGuard(true, 100)
	for _, v := range []int64{1, 3, 4} {
		ev, src := event(t, "Set", v, `{}`)
		if _, err := g.Offer(kv, prefix, ev, src, t0); err != nil {
			t.Fatal(err)
		}
	}
	step, err := g.Expire(kv, prefix, "A", projection.DeadLetter, t0.Add(time.Hour), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(step.Dropped) != 2 || step.Dropped[0].Offset != 3 || step.Dropped[1].Offset != 4 || step.HeldCount != 0 {
		t.Fatalf("dropped %+v held %d", step.Dropped, step.HeldCount)
	}
	// v2 arrives late: applied; v3, v4 are gone (dead-lettered).
	ev, src := event(t, "Set", 2, `{}`)
	step, _ = g.Offer(kv, prefix, ev, src, t0)
	if len(step.Changes) != 1 {
		t.Fatalf("late v2: %+v", step.Changes)
	}
}

// TestMergePatchRFC7386 checks the RFC's own examples.
func TestMergePatchRFC7386(t *testing.T) {
	for _, c := range []struct{ doc, patch, want string }{
		{`{"a":"b"}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"b"}`, `{"b":"c"}`, `{"a":"b","b":"c"}`},
		{`{"a":"b"}`, `{"a":null}`, `{}`},
		{`{"a":"b","b":"c"}`, `{"a":null}`, `{"b":"c"}`},
		{`{"a":["b"]}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"c"}`, `{"a":["b"]}`, `{"a":["b"]}`},
		{`{"a":{"b":"c"}}`, `{"a":{"b":"d","c":null}}`, `{"a":{"b":"d"}}`},
		{`{"a":[{"b":"c"}]}`, `{"a":[1]}`, `{"a":[1]}`},
		{`{}`, `{"a":{"bb":{"ccc":null}}}`, `{"a":{"bb":{}}}`},
		{`{"n":1.50}`, `{"m":10000000000000000001}`, `{"m":10000000000000000001,"n":1.50}`},
	} {
		got, err := projection.MergePatch([]byte(c.doc), []byte(c.patch))
		if err != nil || string(got) != c.want {
			t.Errorf("merge %s + %s = %s (%v), want %s", c.doc, c.patch, got, err, c.want)
		}
		if !json.Valid(got) {
			t.Errorf("invalid JSON %s", got)
		}
	}
}
