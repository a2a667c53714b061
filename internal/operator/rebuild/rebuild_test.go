package rebuild

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// Hooks are the processor's test hooks.
type Hooks = eos.Hooks

// TestRebuildEqualsLive is docs/design.md#no-effects-in-rebuild and
// docs/design.md#rebuild-equals-live at scale (acceptance 1 and 4 of #5): a
// live worker with a side effect processes ≥ 100k events; a rebuild of the
// same input runs while the live worker keeps consuming new events, and a
// second run catches up with what arrived since; then the rebuilt topic
// equals the live one key for key, the rebuild called nothing and produced no
// intent, and its suppressed count equals the intents live produced. It logs
// the rebuild rate against the live rate on the same data.
func TestRebuildEqualsLive(t *testing.T) {
	f := newFixture(t)
	cfg := f.config(t, true, 0)
	// The rebuild's copy of the configuration points the webhook at a
	// receiver of its own: any call a rebuild made would show there.
	rebuildRecv := newReceiver(t)
	rcfg := f.configTo(t, true, 0, rebuildRecv)
	o := workloadOptions(120_000, 7)
	recs, exp := testkitGenerate(o)
	s1, s2 := len(recs)*85/100, len(recs)*93/100
	phase1, phase2, phase3 := recs[:s1], recs[s1:s2], recs[s2:]
	produce(t, f.brokers, phase1)

	// The live worker, with its side-effect executor calling the receiver.
	a := startLive(t, cfg)
	liveTook := waitCaughtUp(t, f.brokers, liveName)
	liveRate := float64(len(phase1)) / liveTook.Seconds()

	// The rebuild, while new events keep arriving and the live worker
	// consumes them.
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		step := len(phase2)/10 + 1
		for i := 0; i < len(phase2); i += step {
			produce(t, f.brokers, phase2[i:min(i+step, len(phase2))])
			time.Sleep(50 * time.Millisecond) // sleep ok: paces the producer, so that the rebuild runs while input arrives
		}
	}()
	var progress bytes.Buffer
	pr := NewProgress(&progress, ProgressLines, time.Second)
	first := rebuildNow(t, Options{Config: rcfg, Projection: "overview", Topic: "overview.v2", Progress: pr})
	<-produced
	produce(t, f.brokers, phase3)
	waitCaughtUp(t, f.brokers, liveName)
	if first.Target < int64(len(phase1)) || first.Resumed {
		t.Errorf("first run: target %d (phase 1 has %d records), resumed %v", first.Target, len(phase1), first.Resumed)
	}
	// The end offsets were taken at start: a second run catches up with
	// what arrived since.
	second := rebuildNow(t, Options{Config: rcfg, Topic: "overview.v2"})
	if !second.Resumed || second.Records < int64(len(phase3)) {
		t.Errorf("second run: resumed %v, %d records (phase 3 has %d)", second.Resumed, second.Records, len(phase3))
	}
	if got := first.Records + second.Records; got != int64(len(recs)) {
		t.Errorf("rebuild consumed %d records over two runs, want %d", got, len(recs))
	}

	// Both caught up: equal key for key.
	rep := diff(t, f.brokers, liveTopic, "overview.v2", 10)
	if !rep.Identical() || rep.Keys != len(exp.Final) {
		var b strings.Builder
		rep.Write(&b)
		t.Fatalf("rebuilt topic differs from live (%d keys expected):\n%s", len(exp.Final), b.String())
	}
	ctxR, cancelR := context.WithTimeout(context.Background(), time.Minute)
	defer cancelR()
	out, err := testkit.ReadAll(ctxR, f.brokers, "overview.v2")
	if err != nil {
		t.Fatal(err)
	}
	if cr := testkit.CheckProjection(out, exp.Final); !cr.OK() {
		t.Errorf("rebuilt topic against the reference fold: %s", cr)
	}

	// Side effects: the rebuild counted every intent live produced as
	// suppressed, produced none (the intents topic holds live's only: an
	// intent produced by the rebuild would reach the live executor) and
	// called nothing.
	enqueued := a.Processor.Stats().Effects(effectName, processor.IntentEnqueued)
	if enqueued == 0 {
		t.Fatal("the workload produced no side effects")
	}
	suppressed := first.Suppressed[effectName] + second.Suppressed[effectName]
	if suppressed != enqueued {
		t.Errorf("rebuild suppressed %d intents, live enqueued %d", suppressed, enqueued)
	}
	ctxE, cancelE := context.WithTimeout(context.Background(), time.Minute)
	defer cancelE()
	intents, err := testkit.ReadAll(ctxE, f.brokers, cfg.Kafka.EffectsTopic)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(intents)) != enqueued {
		t.Errorf("intents topic has %d records; live enqueued %d (the rebuild must produce none)", len(intents), enqueued)
	}
	if reqs, _ := rebuildRecv.counts(); reqs != 0 {
		t.Errorf("the rebuild's webhook receiver saw %d requests", reqs)
	}
	// The live executor calls each live intent once.
	liveKeys := map[string]bool{}
	for _, r := range intents {
		liveKeys[string(r.Key)] = true
	}
	// Every live intent called and its success recorded: a call is over
	// before its outcome is, so a second call of a key made alongside the
	// first has reached the receiver by then. (On time out, the checks
	// below say what is missing.)
	_ = testkit.WaitFor(context.Background(), time.Minute, func() bool {
		n, _ := f.recv.counts()
		return int64(n) >= enqueued && a.Executor.Stats().Effects(effectName, effect.Succeeded) >= enqueued
	})
	for k, n := range f.recv.received() {
		if n != 1 || !liveKeys[k] {
			t.Errorf("live receiver: key %q called %d times (a live intent: %v)", k, n, liveKeys[k])
		}
	}
	liveCalls, liveCallKeys := f.recv.counts()
	if int64(liveCalls) != enqueued || int64(liveCallKeys) != enqueued {
		t.Errorf("live receiver saw %d calls for %d keys; live enqueued %d", liveCalls, liveCallKeys, enqueued)
	}
	// Dead letters went to the rebuild's own topic.
	liveDLQ, rebuildDLQ := readAll(t, f.brokers, cfg.Kafka.DeadLetterTopic), readAll(t, f.brokers, "overview.v2.dlq")
	if wantDL := exp.Invalid + exp.Conflicts; liveDLQ != wantDL || rebuildDLQ != wantDL {
		t.Errorf("dead letters: live topic %d, rebuild topic %d; want %d each", liveDLQ, rebuildDLQ, wantDL)
	}
	if p := progress.String(); !strings.Contains(p, "records on 4 partitions") || !strings.Contains(p, ": done:") {
		t.Errorf("progress lines:\n%s", p)
	}
	var sum strings.Builder
	first.WriteSummary(&sum)
	t.Logf("first run:\n%s", sum.String())
	t.Logf("%d events (%d records), %d keys; live enqueued %d intents (%d called, each once); rebuild suppressed %d, produced 0, called 0; projection diff %d, missing %d",
		o.Events, len(recs), rep.Keys, enqueued, liveCalls, suppressed, rep.Different, rep.MissingInA+rep.MissingInB)
	t.Logf("figures: live %.0f records/s (%d records in %s, effects enqueued); rebuild %.0f records/s (%d records in %s, beside the live worker); rebuild/live %.2f",
		liveRate, len(phase1), liveTook.Round(time.Millisecond), first.Rate(), first.Records, first.Duration.Round(time.Millisecond), first.Rate()/liveRate)
}

// TestRebuildStopCrashResume (acceptance 2 of #5): a rebuild stopped half
// way (SIGTERM: its context), then crashed after a Kafka commit before the
// Pebble write, then crashed with a transaction open, and then run again,
// finishes with the same topic as an uninterrupted rebuild: no version
// emitted twice, none lost.
func TestRebuildStopCrashResume(t *testing.T) {
	f := newFixture(t)
	o := workloadOptions(40_000, 11)
	recs, exp := testkitGenerate(o)
	// About 90 transactions, so that the stops below fall half way.
	cfg := f.config(t, true, max(len(recs)/90, 20))
	// A crashed run does not leave the group: its successor waits for the
	// session to time out before it gets partitions.
	cfg.Kafka.SessionTimeout = config.Duration(6 * time.Second)
	produce(t, f.brokers, recs)
	ref := rebuildNow(t, Options{Config: cfg, Topic: "ref"})

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(hooks *Hooks) (*Result, error) {
		return Run(ctx, Options{Config: cfg, Topic: "resumed", Hooks: hooks})
	}
	var records int64
	// 1. Stopped: the context is cancelled after the 10th commit.
	stopCtx, stop := context.WithCancel(ctx)
	commits := 0
	res, err := Run(stopCtx, Options{Config: cfg, Topic: "resumed", Hooks: &Hooks{AfterCommit: func() error {
		if commits++; commits == 10 {
			stop()
		}
		return nil
	}}})
	stop()
	if err != nil || res.Completed || res.Records == 0 || res.Records >= res.Target {
		t.Fatalf("stopped run: err %v, %+v", err, res)
	}
	records += res.Records
	suppressed := res.Suppressed[effectName]
	// 2. Crash after the Kafka commit, before the Pebble write.
	commits = 0
	res, err = run(&Hooks{AfterCommit: func() error {
		if commits++; commits == 5 {
			return errCrash
		}
		return nil
	}})
	if err == nil || res == nil || res.Completed || !res.Resumed {
		t.Fatalf("crash after commit: err %v, %+v", err, res)
	}
	records += res.Records
	// 3. Crash with the transaction open.
	commits = 0
	res, err = run(&Hooks{AfterStage: func() error {
		if commits++; commits == 5 {
			return errCrash
		}
		return nil
	}})
	if err == nil || res == nil || res.Completed {
		t.Fatalf("crash before commit: err %v, %+v", err, res)
	}
	records += res.Records
	// 4. Resumed to the end.
	last := rebuildNow(t, Options{Config: cfg, Topic: "resumed"})
	records += last.Records
	if records != int64(len(recs)) {
		t.Errorf("the runs consumed %d records together, want %d", records, len(recs))
	}
	rep := diff(t, f.brokers, "ref", "resumed", 10)
	if !rep.Identical() {
		var b strings.Builder
		rep.Write(&b)
		t.Fatalf("resumed rebuild differs from the uninterrupted one:\n%s", b.String())
	}
	out, err := testkit.ReadAll(ctx, f.brokers, "resumed")
	if err != nil {
		t.Fatal(err)
	}
	cr := testkit.CheckProjection(out, exp.Final)
	if !cr.OK() {
		t.Errorf("resumed rebuild against the reference fold: %s", cr)
	}
	// Suppressed intents are counted per committed transaction; the one
	// committed just before the crash in 2 was not published.
	suppressed += last.Suppressed[effectName]
	if suppressed > ref.Suppressed[effectName] || suppressed == 0 {
		t.Errorf("suppressed %d over the runs, uninterrupted %d", suppressed, ref.Suppressed[effectName])
	}
	t.Logf("%d events (%d records), 1 stop, 2 crashes; output dup %d, nonmonotonic %d, lost %d, projection diff %d (vs uninterrupted: %d different, %d missing)",
		o.Events, len(recs), cr.Dup, cr.NonMonotonic, cr.Lost, cr.Diff, rep.Different, rep.MissingInA+rep.MissingInB)
}

var errCrash = errors.New("injected crash")

// TestRebuildChangedRule (acceptance 3 of #5): a rebuild with CaseEscalated
// no longer merged differs from the original rule exactly on the aggregates
// whose final state the escalations shaped, computed here by an independent
// fold of the workload.
func TestRebuildChangedRule(t *testing.T) {
	f := newFixture(t)
	o := workloadOptions(30_000, 5)
	recs, exp := testkitGenerate(o)
	produce(t, f.brokers, recs)
	rebuildNow(t, Options{Config: f.config(t, true, 0), Topic: "with-escalation"})
	rebuildNow(t, Options{Config: f.config(t, false, 0), Topic: "without-escalation"})
	rep := diff(t, f.brokers, "with-escalation", "without-escalation", -1)

	want := changedKeys(t, recs)
	if len(want) == 0 {
		t.Fatal("the workload has no escalations")
	}
	got := map[string]bool{}
	for _, d := range rep.Differences {
		got[d.Key] = true
		if d.Kind != Different || d.A == nil || d.B == nil || (!d.A.Deleted && !d.B.Deleted && d.A.Version != d.B.Version) {
			t.Errorf("%s: %s, A %v, B %v: want the same version with another state", d.Key, d.Kind, d.A, d.B)
		}
		if !want[d.Key] {
			t.Errorf("%s differs but the escalations did not shape its final state", d.Key)
		}
		for _, w := range d.What {
			if w != "state.status" && w != "state.reasonCode" && w != "state.level" {
				t.Errorf("%s: %s differs; only the escalation fields may", d.Key, w)
			}
		}
	}
	for k := range want {
		if !got[k] {
			t.Errorf("%s: escalations shaped its final state, but diff reports it equal", k)
		}
	}
	if rep.Different != len(want) || rep.MissingInA+rep.MissingInB != 0 || rep.Keys != len(exp.Final) {
		t.Errorf("diff: %d keys, %d different, %d missing; want %d keys, %d different", rep.Keys, rep.Different,
			rep.MissingInA+rep.MissingInB, len(exp.Final), len(want))
	}
	t.Logf("%d events, %d aggregates: diff reports %d different (expected %d), %d equal, 0 missing",
		o.Events, len(exp.Final), rep.Different, len(want), rep.Equal)
}

// changedKeys folds each aggregate's events (in version order, each version
// once) twice, with and without merging CaseEscalated, and returns the
// aggregates whose final states differ.
func changedKeys(t *testing.T, recs []workload.Record) map[string]bool {
	type event struct {
		typ     string
		payload map[string]any
	}
	evs, err := workload.FirstDeliveries(recs)
	if err != nil {
		t.Fatal(err)
	}
	hist := map[string]map[int64]event{}
	for _, e := range evs {
		if hist[e.Agg] == nil {
			hist[e.Agg] = map[int64]event{}
		}
		hist[e.Agg][e.Version] = event{e.Type, e.Payload}
	}
	fold := func(h map[int64]event, merged map[string]bool) (map[string]any, bool) {
		var st map[string]any
		deleted := false
		for v := int64(1); v <= int64(len(h)); v++ {
			e := h[v]
			switch {
			case e.typ == "CaseClosed":
				st, deleted = nil, true
			case merged[e.typ]:
				if st == nil {
					st = map[string]any{}
				}
				deleted = false
				st = mergePatch(st, e.payload)
			}
		}
		return st, deleted
	}
	with := map[string]bool{"CaseOpened": true, "CaseUpdated": true, "CaseEscalated": true}
	without := map[string]bool{"CaseOpened": true, "CaseUpdated": true}
	out := map[string]bool{}
	for agg, h := range hist {
		s1, d1 := fold(h, with)
		s2, d2 := fold(h, without)
		if d1 != d2 || (!d1 && !reflect.DeepEqual(orEmpty(s1), orEmpty(s2))) {
			out[agg] = true
		}
	}
	return out
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// mergePatch is RFC 7386.
func mergePatch(target map[string]any, patch map[string]any) map[string]any {
	for k, v := range patch {
		switch pv := v.(type) {
		case nil:
			delete(target, k)
		case map[string]any:
			tv, _ := target[k].(map[string]any)
			if tv == nil {
				tv = map[string]any{}
			}
			target[k] = mergePatch(tv, pv)
		default:
			target[k] = v
		}
	}
	return target
}

// TestRebuildFrom: --from starts a new rebuild at the first record at or
// after a time.
func TestRebuildFrom(t *testing.T) {
	f := newFixture(t)
	o := workloadOptions(4_000, 3)
	o.Duplicates, o.Conflicts, o.Stale, o.Invalid = 0, 0, 0, 0
	recs, _ := testkitGenerate(o)
	split := len(recs) / 4
	produce(t, f.brokers, recs[:split])
	// Record timestamps are milliseconds: from lies in a millisecond after
	// the first part's and before the second part's.
	from := nextMilli(t, time.Now())
	nextMilli(t, from)
	produce(t, f.brokers, recs[split:])
	// The rebuild serves its metrics: suppressed intents show there.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	const series = `projector_side_effects_total{effect="sla-breach-email",status="suppressed"} `
	var scraped []string
	hooks := &Hooks{AfterCommit: func() error {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, series) {
				scraped = append(scraped, strings.TrimPrefix(l, series))
			}
		}
		return nil
	}}
	res := rebuildNow(t, Options{Config: f.config(t, true, len(recs)/10), Topic: "from", From: from, HTTPListen: addr, Hooks: hooks})
	if want := int64(len(recs) - split); res.Target != want || res.Records != want || res.From != from {
		t.Errorf("from %s: target %d, records %d; want %d", from, res.Target, res.Records, want)
	}
	// Each scrape sees the transactions before the one just committed.
	if len(scraped) < 2 || scraped[0] != "0" || scraped[len(scraped)-1] == "0" {
		t.Errorf("scraped %s: %v (suppressed in all: %d)", series, scraped, res.Suppressed[effectName])
	}
}

// TestOptionsValidate: the rebuild refuses targets the live worker uses.
func TestOptionsValidate(t *testing.T) {
	f := &fixture{brokers: []string{"127.0.0.1:1"}, dir: t.TempDir(), recv: newReceiver(t)}
	cfg := f.config(t, true, 0)
	for _, tc := range []struct {
		name string
		o    Options
		opt  string
	}{
		{"no topic", Options{}, "--topic"},
		{"live topic", Options{Topic: liveTopic}, "--topic"},
		{"input", Options{Topic: input}, "--topic"},
		{"dead-letter topic", Options{Topic: cfg.Kafka.DeadLetterTopic}, "--topic"},
		{"intents topic", Options{Topic: cfg.Kafka.EffectsTopic}, "--topic"},
		{"live changelog", Options{Topic: "rb.events.changelog"}, "--topic"},
		{"bad name", Options{Topic: "a b"}, "--topic"},
		{"unknown projection", Options{Topic: "x", Projection: "nope"}, "--projection"},
		{"live dead letters", Options{Topic: "x", DeadLetterTopic: cfg.Kafka.DeadLetterTopic}, "--dead-letter-topic"},
		{"dead letters into the target", Options{Topic: "x", DeadLetterTopic: "x"}, "--dead-letter-topic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Config = cfg
			_, err := Run(context.Background(), tc.o)
			var oe *OptionError
			if !errors.As(err, &oe) || oe.Option != tc.opt {
				t.Fatalf("got %v, want an OptionError for %s", err, tc.opt)
			}
		})
	}
	if g, d := Group("rb", "x.v2"), StateDir(cfg, "x.v2"); g != "rb-rebuild-x.v2" || d != filepath.Join(cfg.State.Dir, "rebuild-x.v2") {
		t.Errorf("group %s, state dir %s", g, d)
	}
}

// nextMilli waits until the clock has passed the millisecond of after and
// returns the time then.
func nextMilli(t *testing.T, after time.Time) time.Time {
	t.Helper()
	var now time.Time
	testkit.Await(t, time.Second, "the clock's next millisecond", func() bool {
		now = time.Now()
		return now.UnixMilli() > after.UnixMilli()
	})
	return now
}
