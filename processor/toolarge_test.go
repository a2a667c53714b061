package processor_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/projection"
	"github.com/projector-dev/projector/sideeffects/effect"
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
	if n := waitEvents(st, processor.OutcomeHeld, 1); n != 1 {
		t.Errorf("%d held, want 1 (version 5 behind the dead-lettered version 4)", n)
	}
	if n := waitEvents(st, processor.OutcomeTooLarge, 1); n != 1 {
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

// TestCommandHugeNonJSONValueDeadLettered: a projector-command header on a
// 600 KB non-JSON value is dead-lettered with a bounded projector-error (it
// used to quote the whole value into the header, past any limit), and the
// worker keeps running: the event after it is applied.
func TestCommandHugeNonJSONValueDeadLettered(t *testing.T) {
	e := newEnv(t, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ProducerBatchMaxBytes(4<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	cmd := &kgo.Record{Topic: inputTopic, Key: []byte("CMD-1"), Value: []byte(strings.Repeat("\x01not json ", 60<<10)),
		Headers: []kgo.RecordHeader{{Key: processor.HeaderCommand, Value: []byte("1")}}}
	after := bigMerge("AFTER-1", 1, 10)
	if err := cl.ProduceSync(t.Context(), cmd, &kgo.Record{Topic: inputTopic, Key: after.Key, Value: after.Value}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	in := e.start(instOpts{})
	e.waitCaughtUp(30 * time.Second)
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	applied := false
	for _, r := range e.read(projTopic) {
		applied = applied || string(r.Key) == "AFTER-1"
	}
	if !applied {
		t.Error("the event after the command was not applied")
	}
	dl := e.read(dlqTopic)
	checkHeadersBounded(t, dl)
	if len(dl) != 1 || header(dl[0], processor.HeaderReason) != "invalid:value" {
		t.Fatalf("want one invalid:value dead letter, got %d", len(dl))
	}
}

// TestMixedLargeTrafficNeverExits is the acceptance 3: 1 MB-ish
// events (which fit the limit but not the producer's old default), events
// whose state outgrows the limit, a huge input header and a huge non-JSON
// command, mixed with normal traffic: every normal and 1 MB-ish event is
// applied, every oversize one is dead-lettered too-large, and the worker
// never exits.
func TestMixedLargeTrafficNeverExits(t *testing.T) {
	e := newEnv(t, 1)
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ProducerBatchMaxBytes(4<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	add := func(w workload.Record, hs ...kgo.RecordHeader) {
		recs = append(recs, &kgo.Record{Topic: inputTopic, Key: w.Key, Value: w.Value, Headers: hs})
	}
	wantApplied := map[string]int{} // aggregate → final version
	for i := 0; i < 4; i++ {
		n := fmt.Sprintf("N-%d", i)
		add(bigMerge(n, 1, 10))
		// 1 MB-ish: over the producer's old default (1,000,012 bytes)
		add(bigMerge(fmt.Sprintf("M-%d", i), 1, 1_000_000+i*10_000))
		add(bigMerge(n, 2, 10), kgo.RecordHeader{Key: "x-big", Value: []byte(strings.Repeat("h", 200<<10))})
		// oversize: two 600 KB merges; the second outgrows the limit and
		// the small third waits behind it.
		g := fmt.Sprintf("G-%d", i)
		add(bigMerge(g, 1, 600<<10))
		add(bigMerge(g, 2, 600<<10))
		add(bigMerge(g, 3, 10))
		add(workload.Record{Key: []byte("CMD"), Value: []byte(strings.Repeat("z", 600<<10))},
			kgo.RecordHeader{Key: processor.HeaderCommand, Value: []byte("1")})
		wantApplied[n], wantApplied[fmt.Sprintf("M-%d", i)], wantApplied[g] = 2, 1, 1
	}
	for _, r := range recs {
		if err := cl.ProduceSync(t.Context(), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	in := e.start(instOpts{})
	e.waitCaughtUp(60 * time.Second)
	select {
	case err := <-in.done:
		in.store.Close()
		t.Fatalf("the worker exited: %v", err)
	default:
	}
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range e.read(projTopic) {
		got[string(r.Key)] = string(r.Value)
	}
	for agg, v := range wantApplied {
		if !strings.Contains(got[agg], fmt.Sprintf(`"version":%d,`, v)) {
			t.Errorf("%s: not at version %d", agg, v)
		}
	}
	dl := e.read(dlqTopic)
	checkHeadersBounded(t, dl)
	reasons := map[string]int{}
	for _, r := range dl {
		reasons[header(r, processor.HeaderReason)]++
	}
	if reasons["too-large"] != 4 || reasons["invalid:value"] != 4 || len(dl) != 8 {
		t.Errorf("dead letters by reason %v, want too-large 4 and invalid:value 4", reasons)
	}
}

// TestTooLargeDrainLeavesHeld: the offered event fits, but a held event it
// would drain outgrows the limit: the offered event is applied, the held one
// stays held (under the gap policy), and nothing is dead-lettered.
func TestTooLargeDrainLeavesHeld(t *testing.T) {
	e := newEnv(t, 1)
	e.produce([]workload.Record{bigMerge("D-1", 1, 10), bigMerge("D-1", 3, 600<<10), bigMerge("D-1", 2, 600<<10)})
	in := e.start(instOpts{})
	e.waitCaughtUp(30 * time.Second)
	if n := waitEvents(in.p.Stats(), processor.OutcomeHeld, 1); n != 1 {
		t.Errorf("%d held, want 1", n)
	}
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	var last string
	for _, r := range e.read(projTopic) {
		last = string(r.Value)
	}
	if !strings.Contains(last, `"version":2,`) {
		t.Errorf("D-1 not at version 2")
	}
	if dl := e.read(dlqTopic); len(dl) != 0 {
		t.Errorf("%d dead letters (reason %q), want none", len(dl), header(dl[0], processor.HeaderReason))
	}
}

// waitEvents waits up to 10 s for the committed count of outcome to reach
// want (the counters are published after the commit that the caught-up
// offsets show) and returns it.
func waitEvents(st *processor.Stats, outcome processor.Outcome, want int64) int64 {
	return waitProjectionEvents(st, "case-overview", outcome, want)
}

// waitProjectionEvents is waitEvents for any projection.
func waitProjectionEvents(st *processor.Stats, projection string, outcome processor.Outcome, want int64) int64 {
	// On time out the caller's check says what is wrong.
	_ = testkit.WaitFor(context.Background(), 10*time.Second, func() bool { return st.Events(projection, outcome) >= want })
	return st.Events(projection, outcome)
}

// TestSkipExpiryTooLargeDeadLettered: under onTimeout skip, the gap of
// BIG-2 (version 1 never comes) expires and the skip applies versions 2 to
// 4; version 5's merge would make the state outgrow kafka.maxRecordBytes.
// It is dead-lettered too-large and left out (the skip used to produce it
// and abort the transaction, again after every restart), and version 6
// waits behind it until the next expiry skips it too. The partition keeps
// flowing: SMALL-2, produced after, is applied.
func TestSkipExpiryTooLargeDeadLettered(t *testing.T) {
	e := newEnv(t, 1)
	var clock skewedClock
	var recs []workload.Record
	for v := 2; v <= 5; v++ {
		recs = append(recs, bigMerge("BIG-2", v, 300<<10))
	}
	recs = append(recs, bigMerge("BIG-2", 6, 10))
	e.produce(recs)
	in := e.start(instOpts{policy: projection.Skip, hold: time.Minute, now: clock.now})
	st := in.p.Stats()
	if n := waitEvents(st, processor.OutcomeHeld, 5); n != 5 {
		t.Fatalf("%d held, want 5", n)
	}
	clock.set(2 * time.Minute) // the gap before version 2 expires
	if n := waitEvents(st, processor.OutcomeTooLarge, 1); n != 1 {
		t.Fatalf("%d too-large outcomes after the first expiry, want 1", n)
	}
	if n := waitEvents(st, processor.OutcomeApplied, 3); n != 3 {
		t.Errorf("%d applied after the first expiry, want 3 (versions 2 to 4)", n)
	}
	if g := st.Gaps()["case-overview"]; g.Open != 1 {
		t.Errorf("%d gaps open after the first expiry, want 1 (version 6 behind the dead-lettered 5)", g.Open)
	}
	clock.set(4 * time.Minute) // the new gap before version 6 expires
	if n := waitEvents(st, processor.OutcomeApplied, 4); n != 4 {
		t.Errorf("%d applied after the second expiry, want 4 (version 6 too)", n)
	}
	e.produce([]workload.Record{bigMerge("SMALL-2", 1, 10)})
	if n := waitEvents(st, processor.OutcomeApplied, 5); n != 5 {
		t.Errorf("%d applied, want 5 (SMALL-2 too)", n)
	}
	select {
	case err := <-in.done:
		t.Fatalf("the worker exited: %v", err)
	default:
	}
	if n := st.Transactions("aborted"); n != 0 {
		t.Errorf("%d aborted transactions, want 0", n)
	}
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	latest := map[string]*kgo.Record{}
	for _, r := range e.read(projTopic) {
		latest[string(r.Key)] = r
	}
	if r := latest["BIG-2"]; r == nil || !strings.Contains(string(r.Value), `"version":6`) {
		t.Errorf("BIG-2: want its projection at version 6, after version 5 was left out")
	}
	if latest["SMALL-2"] == nil {
		t.Errorf("SMALL-2 not applied")
	}
	dl := e.read(dlqTopic)
	checkHeadersBounded(t, dl)
	if len(dl) != 1 || header(dl[0], processor.HeaderReason) != "too-large" || !strings.Contains(string(dl[0].Value), `"aggregateVersion":5`) {
		t.Fatalf("dead letters: want one, version 5, too-large; got %d", len(dl))
	}
	if !strings.Contains(header(dl[0], processor.HeaderError), "maxRecordBytes") {
		t.Errorf("projector-error %q does not name the limit", header(dl[0], processor.HeaderError))
	}
}

// TestTooLargeOneDeadLetterPerRecord: a merge too large for two projections
// that both take it is dead-lettered once, the message naming both, and
// counted too-large for each.
func TestTooLargeOneDeadLetterPerRecord(t *testing.T) {
	e := newEnv(t, 1)
	second := &projection.Projection{Name: "case-archive", Topic: "case-archive.v1", Handler: rules(), Versioned: false}
	var recs []workload.Record
	for v := 1; v <= 4; v++ {
		recs = append(recs, bigMerge("BIG-3", v, 300<<10))
	}
	e.produce(recs)
	in := e.start(instOpts{extra: []*projection.Projection{second}})
	st := in.p.Stats()
	if n := waitEvents(st, processor.OutcomeTooLarge, 1); n != 1 {
		t.Fatalf("case-overview: %d too-large, want 1", n)
	}
	if n := waitProjectionEvents(st, "case-archive", processor.OutcomeTooLarge, 1); n != 1 {
		t.Fatalf("case-archive: %d too-large, want 1", n)
	}
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	dl := e.read(dlqTopic)
	if len(dl) != 1 {
		t.Fatalf("%d dead letters, want 1 for the one record", len(dl))
	}
	msg := header(dl[0], processor.HeaderError)
	if header(dl[0], processor.HeaderReason) != "too-large" || !strings.Contains(msg, "case-overview") || !strings.Contains(msg, "case-archive") {
		t.Errorf("dead letter: reason %q, error %q; want too-large naming both projections", header(dl[0], processor.HeaderReason), msg)
	}
}

// TestCommandsDeadLetteredWithReason: skip-gap commands that are malformed
// or cannot apply, each between events, are dead-lettered invalid:value
// with an error naming the problem, and the events after them are applied
// (docs/design.md#nothing-dropped-silently; issue 22's audit of the command
// path).
func TestCommandsDeadLetteredWithReason(t *testing.T) {
	e := newEnv(t, 1)
	cmds := []struct{ value, why string }{
		{`{"op":"skip-gap","projection":"nope","aggregate":"CASE-1"}`, `skip-gap: no projection "nope"`},
		{`{"op":"skip-gap","aggregate":"CASE-1"}`, `aggregate "CASE-1" holds no events`},
		{`{"op":"skip-gap"}`, "no op this topic takes, or a member it needs is missing"},
		{`{"op":"explode","aggregate":"CASE-1"}`, "no op this topic takes"},
		{`{"op":"skip-gap","aggregate":7}`, "Command.aggregate of type string"},
		{`{"op":"skip-gap",`, "unexpected end of JSON input"},
	}
	var recs []*kgo.Record
	for i, c := range cmds {
		ev := bigMerge(fmt.Sprintf("AFTER-%d", i), 1, 10)
		recs = append(recs,
			&kgo.Record{Topic: inputTopic, Key: []byte("CASE-1"), Value: []byte(c.value),
				Headers: []kgo.RecordHeader{{Key: processor.HeaderCommand, Value: []byte("1")}}},
			&kgo.Record{Topic: inputTopic, Key: ev.Key, Value: ev.Value})
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(t.Context(), recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	in := e.start(instOpts{})
	e.waitCaughtUp(30 * time.Second)
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	applied := 0
	for _, r := range e.read(projTopic) {
		if strings.HasPrefix(string(r.Key), "AFTER-") {
			applied++
		}
	}
	if applied != len(cmds) {
		t.Errorf("%d events after the commands applied, want %d", applied, len(cmds))
	}
	got := map[string]string{}
	for _, r := range e.read(dlqTopic) {
		if reason := header(r, processor.HeaderReason); reason != "invalid:value" {
			t.Errorf("dead letter %q: reason %s", r.Value, reason)
		}
		got[string(r.Value)] = header(r, processor.HeaderError)
	}
	for _, c := range cmds {
		if msg, ok := got[c.value]; !ok || !strings.Contains(msg, c.why) {
			t.Errorf("command %s: dead letter %q (found %v), want one naming %q", c.value, msg, ok, c.why)
		}
	}
	if len(got) != len(cmds) {
		t.Errorf("%d dead letters, want %d", len(got), len(cmds))
	}
}

// notifyRules make one side-effect intent per applied event.
type notifyRules struct{}

func (notifyRules) Intents(_ string, ev *projection.Event, version int64) ([]projection.Intent, error) {
	return []projection.Intent{{Effect: "notify", Key: fmt.Sprintf("notify:%s:v%d", ev.AggregateID, version)}}, nil
}

// TestIntentLedgerEntryTooLarge: an event whose intent fits
// kafka.maxRecordBytes as a record, but whose ledger entry could outgrow it
// once it carries its attempt history (effect.MaxRecordBytes), is not
// applied: outcome too-large, one dead letter saying so, and no intent
// produced – the executor could never have written that entry's changelog
// record (issue 22). An event one byte smaller goes through, intent and all.
func TestIntentLedgerEntryTooLarge(t *testing.T) {
	const limit = 1 << 20 // kafka.maxRecordBytes: the processor's default
	intentOf := func(r workload.Record) (key string, value []byte) {
		ev, err := envelope.Decode(r.Value, 0)
		if err != nil {
			t.Fatal(err)
		}
		in := projection.Intent{Effect: "notify", Key: fmt.Sprintf("notify:%s:v1", ev.AggregateID)}
		return in.Key, effect.IntentValue(in, "case-overview", (*projection.Event)(ev), 1, r.Value)
	}
	ledgerRecord := func(r workload.Record) int {
		key, v := intentOf(r)
		return effect.MaxRecordBytes(key, "notify", len(v)) + eos.RecordOverhead
	}
	// The largest payload whose ledger entry fits.
	lo, hi := 0, limit
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if ledgerRecord(bigMerge("FITS-1", 1, mid)) <= limit {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	fits, over := bigMerge("FITS-1", 1, lo), bigMerge("OVER-1", 1, lo+1)
	if key, v := intentOf(over); len(key)+len(v)+eos.RecordOverhead > limit-64<<10 {
		t.Fatalf("the intent record is %d bytes: this test wants one that fits the limit with room", len(key)+len(v))
	}
	e := newEnv(t, 1)
	e.produce([]workload.Record{over, fits})
	in := e.start(instOpts{rules: notifyRules{}})
	e.waitCaughtUp(60 * time.Second)
	st := in.p.Stats()
	if n := waitEvents(st, processor.OutcomeTooLarge, 1); n != 1 {
		t.Errorf("%d too-large outcomes, want 1", n)
	}
	if n := waitEvents(st, processor.OutcomeApplied, 1); n != 1 {
		t.Errorf("%d applied, want 1 (the event one byte smaller)", n)
	}
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	dl := e.read(dlqTopic)
	checkHeadersBounded(t, dl)
	if len(dl) != 1 || string(dl[0].Key) != "OVER-1" || header(dl[0], processor.HeaderReason) != processor.ReasonTooLarge {
		t.Fatalf("dead letters: want one, OVER-1, too-large; got %d", len(dl))
	}
	if msg := header(dl[0], processor.HeaderError); !strings.Contains(msg, "ledger entry") || !strings.Contains(msg, "maxRecordBytes") {
		t.Errorf("projector-error %q does not say that the ledger entry would outgrow the limit", msg)
	}
	intents := e.read("case-events.effects")
	if len(intents) != 1 || string(intents[0].Key) != "notify:FITS-1:v1" {
		var keys []string
		for _, r := range intents {
			keys = append(keys, string(r.Key))
		}
		t.Fatalf("intents produced for %v, want only notify:FITS-1:v1", keys)
	}
	t.Logf("payload %d bytes: intent record %d bytes, ledger entry up to %d: applied; one byte more: too-large",
		lo, len(intents[0].Key)+len(intents[0].Value), ledgerRecord(fits))
}
