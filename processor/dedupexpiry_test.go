package processor_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/processor"
)

// TestDedupExpiryEndToEnd (docs/decisions/020): once the clock has passed the
// retention and an epoch more, the next transaction's sweep deletes the
// expired epoch's entries from Pebble, with the range deletion it stages,
// and tombstones its segment in the changelog. A redelivery of an event
// marked in it is no longer a duplicate (the versioned projection drops it
// as stale); one of an event marked since still is. A fresh instance that
// restores the changelog holds exactly the entries the first one holds.
func TestDedupExpiryEndToEnd(t *testing.T) {
	e := newEnv(t, 1)
	var clock skewedClock
	task := state.Task{Topic: inputTopic, Partition: 0}
	const retention = 168 * time.Hour // harness_test.go's dedup.NewStore
	// entries lists the ends of the epochs the store's entries fall in, one
	// per entry.
	entries := func(st *state.Store) []int64 {
		t.Helper()
		var ends []int64
		prefix := dedup.EpochPrefix(task.Prefix())
		if err := st.Scan(prefix, func(k, _ []byte) error {
			ends = append(ends, int64(binary.BigEndian.Uint64(k[len(prefix):])))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return ends
	}
	count := func(in *instance, o processor.Outcome, want int64) {
		t.Helper()
		testkit.Await(t, time.Minute, fmt.Sprintf("%d %s", want, o), func() bool { return in.p.Stats().Outcome(o) == want })
	}

	e.produce(gapVersions(1, 2))
	in := e.start(instOpts{maxRecs: 300, now: clock.now})
	count(in, processor.OutcomeApplied, 2)
	testkit.Await(t, time.Minute, "both marks in Pebble", func() bool { return len(entries(in.store)) == 2 })
	first := entries(in.store)[0]

	// Past the retention and the epoch's width: gap-1's and gap-2's epoch
	// has expired, and a sweep pass is due. gap-3's transaction sweeps.
	clock.set(retention + retention/8 + time.Minute)
	e.produce(gapVersions(3))
	count(in, processor.OutcomeApplied, 3)
	testkit.Await(t, time.Minute, "the expired epoch deleted", func() bool {
		ends := entries(in.store)
		return len(ends) == 1 && ends[0] != first
	})

	e.produce(gapVersions(1, 3)) // redeliveries
	count(in, processor.OutcomeStale, 1)
	count(in, processor.OutcomeDuplicate, 1)
	e.waitCaughtUp(time.Minute)
	// gap-1's redelivery was marked again, in the new epoch.
	testkit.Await(t, time.Minute, "the redelivery's mark in Pebble", func() bool { return len(entries(in.store)) == 2 })
	kept := entries(in.store)
	if slices.Contains(kept, first) {
		t.Fatalf("entries %v still in the expired epoch %d", kept, first)
	}

	// The changelog: every segment marked before the clock moved (gap-1's
	// and gap-2's, one or two as the fetches went) is tombstoned, none since.
	// A segment's key is its kind, then its mark time.
	segments, tombstoned := map[string]int64{}, map[string]bool{}
	for _, r := range e.read(processor.ChangelogTopic(group, inputTopic)) {
		if len(r.Key) != 17 || r.Key[0] != dedup.SegmentKind {
			continue
		}
		if r.Value == nil {
			tombstoned[string(r.Key)] = true
		} else {
			segments[string(r.Key)] = int64(binary.BigEndian.Uint64(r.Key[1:]))
		}
	}
	before := 0
	for k, at := range segments {
		expired := at < first
		if expired {
			before++
		}
		if tombstoned[k] != expired {
			t.Fatalf("segment marked at %d (the expired epoch ends at %d): tombstoned %v", at, first, tombstoned[k])
		}
	}
	if before == 0 || len(segments) < before+2 {
		t.Fatalf("%d segments, %d of them before the clock moved: want the first transactions' and two since", len(segments), before)
	}
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}

	fresh := e.start(instOpts{id: "w2", maxRecs: 300, now: clock.now})
	defer fresh.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := fresh.p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if got := entries(fresh.store); !slices.Equal(got, kept) {
		t.Fatalf("a fresh instance restored entries in epochs %v, want %v", got, kept)
	}
}
