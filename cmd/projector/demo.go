package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/configs"
	"github.com/projector-dev/projector/internal/app/broker"
	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/internal/operator/ops"
	"github.com/projector-dev/projector/internal/operator/rebuild"
	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/sideeffects/effect"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("demo", "  projector demo\n  projector demo --bulk 100000 --log-level info").withLogLevel("warn", "worker")
	bulk := fs.Int("bulk", 20000, "events in the generated bulk phase (0 skips it)")
	keep := fs.String("dir", "", "keep the broker and state in this directory (default: a temporary one, removed at the end)")
	if err := fs.parse(args, stdout); err != nil {
		return err
	}
	log, err := fs.common.logger(stderr)
	if err != nil {
		return err
	}
	start := time.Now()
	dir := *keep
	if dir == "" {
		if dir, err = os.MkdirTemp("", "projector-demo-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	d := &demo{stdout: stdout, log: log, w: tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)}
	if err := d.configure(dir); err != nil {
		return err
	}
	// The side effects go to a local sink that honours Idempotency-Key. Its
	// first call for CASE-1's escalation applies the effect and then hangs
	// past the webhook timeout: an unknown outcome, parked for the operator.
	d.sink = newDemoSink(demoUnknownKey)
	defer d.sink.Close()
	// The embedded Schema Registry the Avro topic's values are framed for.
	if d.registry, err = broker.StartRegistry("127.0.0.1:0", ""); err != nil {
		return err
	}
	defer d.registry.Close()
	d.cfg.SchemaRegistry = &config.SchemaRegistry{URL: d.registry.URL()}
	for i := range d.cfg.SideEffects {
		d.cfg.SideEffects[i].Webhook.URL = d.sink.URL
		d.cfg.SideEffects[i].OnUnknown = config.OnUnknownPark
	}
	if d.a, err = wiring.New(d.cfg, wiring.Options{Logger: log}); err != nil {
		return err
	}
	defer d.a.Close()
	fmt.Fprintf(stdout, "projector demo: embedded single-node broker at %s, state in %s\n\n", d.a.Brokers[0], dir)

	// The worker runs for the whole demo.
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.a.Run(runCtx) }()
	defer func() {
		stop()
		<-done
	}()
	if err := d.steps(ctx, *bulk); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nDone in %s.\n", time.Since(start).Round(100*time.Millisecond))
	if d.mismatch > 0 {
		return fmt.Errorf("demo: %d checks did not match", d.mismatch)
	}
	return nil
}

// demo is the demo in progress: the app with its worker running, where it
// prints, and how many of its checks did not match.
type demo struct {
	stdout   io.Writer
	w        *tabwriter.Writer // tables, on stdout
	log      *slog.Logger
	cfg      *config.Config
	a        *wiring.App
	sink     *demoSink
	registry *broker.Registry
	mismatch int
}

// configure loads the demo configuration with its state and broker in dir.
func (d *demo) configure(dir string) error {
	cfg, err := config.Parse(configs.Demo, os.LookupEnv)
	if err != nil {
		return fmt.Errorf("demo configuration: %w", err)
	}
	cfg.State.Dir = filepath.Join(dir, "state")
	cfg.Kafka.EmbeddedBroker.Dir = filepath.Join(dir, "broker")
	cfg.Kafka.MaxRecordsPerTransaction = 1000
	d.cfg = cfg
	return nil
}

// steps runs the demo's parts in order.
func (d *demo) steps(ctx context.Context, bulk int) error {
	if err := testkit.CreateTopic(ctx, d.a.Brokers, d.cfg.Kafka.Input[0].Topic, int32(d.cfg.Kafka.EmbeddedBroker.Partitions)); err != nil {
		return err
	}
	if err := d.story(ctx); err != nil {
		return err
	}
	if err := d.storyEffects(ctx); err != nil {
		return err
	}
	// The HTTP ingress: a request, its retry and a changed payload.
	if d.a.Ingress != nil {
		if err := demoIngress(ctx, d.stdout, d.a); err != nil {
			return err
		}
	}
	if err := d.formats(ctx); err != nil {
		return err
	}
	if bulk > 0 {
		if err := d.volume(ctx, bulk); err != nil {
			return err
		}
	}
	enq, err := d.allEffects(ctx)
	if err != nil {
		return err
	}
	return d.rebuild(ctx, enq)
}

// story is part 1: the hand-written samples, their outcomes against the
// expected ones, the projection and the dead letters.
func (d *demo) story(ctx context.Context) error {
	input := d.cfg.Kafka.Input[0].Topic
	samples := demoSamples()
	var recs []workload.Record
	want := map[string]int64{}
	for _, s := range samples {
		recs = append(recs, workload.Record{Key: []byte(s.key), Value: []byte(s.value)})
		want[s.expect]++
	}
	want["applied"]++ // CASE-2 v3 is applied when v2 closes its gap
	fmt.Fprintf(d.stdout, "1. Producing %d records to %s: 6 cases in order, reordered, duplicated (one re-serialised),\n   with a gap that is never filled, a conflicting event id, a deletion, a stale writer and 4 poison records.\n\n", len(recs), input)
	if err := testkit.Produce(ctx, d.a.Brokers, input, recs); err != nil {
		return err
	}
	if err := testkit.WaitFor(ctx, 30*time.Second, func() bool { return d.a.Processor.Stats().DeadLetters("gap-timeout") >= 1 }); err != nil {
		return fmt.Errorf("waiting for the gap timeout: %w", err)
	}
	st := d.a.Processor.Stats()
	fmt.Fprintln(d.w, "   outcome\texpected\tactual\t")
	for _, o := range []processor.Outcome{processor.OutcomeApplied, processor.OutcomeDuplicate, processor.OutcomeStale,
		processor.OutcomeHeld, processor.OutcomeConflict, processor.OutcomeInvalid} {
		got := st.Outcome(o)
		mark := ""
		if got != want[o.String()] {
			mark = "  <- MISMATCH"
			d.mismatch++
		}
		fmt.Fprintf(d.w, "   %s\t%d\t%d\t%s\n", o, want[o.String()], got, mark)
	}
	d.w.Flush()
	if err := d.printProjection(ctx); err != nil {
		return err
	}
	return d.printDeadLetters(ctx)
}

// printProjection prints the last committed record per key of the projection.
func (d *demo) printProjection(ctx context.Context) error {
	fmt.Fprintf(d.stdout, "\n   Projection %s (committed; last record per key):\n", d.cfg.Projections[0].Topic)
	return d.printProjectionKeys(ctx)
}

// printProjectionKeys prints the last committed record of the projection's
// keys given (all when none is).
func (d *demo) printProjectionKeys(ctx context.Context, only ...string) error {
	rows, err := testkit.ReadAll(ctx, d.a.Brokers, d.cfg.Projections[0].Topic)
	if err != nil {
		return err
	}
	last := map[string]*kgo.Record{}
	for _, r := range rows {
		if len(only) == 0 || slices.Contains(only, string(r.Key)) {
			last[string(r.Key)] = r
		}
	}
	keys := make([]string, 0, len(last))
	for k := range last {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		r := last[k]
		if r.Value == nil {
			fmt.Fprintf(d.w, "   %s\t(deleted: tombstone)\t\n", k)
			continue
		}
		var v testkit.ProjectionValue
		_ = json.Unmarshal(r.Value, &v)
		fmt.Fprintf(d.w, "   %s\tv%d\t%s\n", k, v.Version, v.State)
	}
	d.w.Flush()
	return nil
}

// printDeadLetters prints the dead-letter topic.
func (d *demo) printDeadLetters(ctx context.Context) error {
	dlq := d.cfg.Kafka.DeadLetterTopic
	dlRecs, err := testkit.ReadAll(ctx, d.a.Brokers, dlq)
	if err != nil {
		return err
	}
	fmt.Fprintf(d.stdout, "\n   Dead letters on %s (%d):\n", dlq, len(dlRecs))
	for _, dl := range testkit.DeadLetters(dlRecs) {
		fmt.Fprintf(d.w, "   %s\t%s\t%s\n", dl.Reason, dl.Source, dl.Error)
	}
	d.w.Flush()
	return nil
}

// storyEffects shows part 1's side effect: one SLA-breach email, whose call
// timed out, parked as unknown and then resolved by hand.
func (d *demo) storyEffects(ctx context.Context) error {
	a, cfg := d.a, d.cfg
	if err := testkit.WaitFor(ctx, 30*time.Second, func() bool {
		return a.Executor.Stats().Effects("sla-breach-email", effect.Unknown) >= 1
	}); err != nil {
		return fmt.Errorf("waiting for the side effect: %w", err)
	}
	opts := []kgo.Opt{kgo.SeedBrokers(a.Brokers...)}
	fmt.Fprintf(d.stdout, "\n   Side effects: CASE-1's SLA breach produced intent %q; the sink applied it and then\n   hung past the webhook timeout, so the outcome is unknown and parked (onUnknown: park):\n", demoUnknownKey)
	if err := printLedger(ctx, d.w, opts, cfg); err != nil {
		return err
	}
	if err := ops.SendResolve(ctx, opts, cfg.Kafka.EffectsTopic, demoUnknownKey, effect.Succeeded, "the sink confirms it sent the email"); err != nil {
		return err
	}
	if err := testkit.WaitFor(ctx, 30*time.Second, func() bool {
		return a.Executor.Stats().Resolved("sla-breach-email") >= 1
	}); err != nil {
		return fmt.Errorf("waiting for the resolve: %w", err)
	}
	fmt.Fprintf(d.stdout, "\n   Resolved by hand (what 'projector effects resolve KEY --as succeeded' does):\n")
	if err := printLedger(ctx, d.w, opts, cfg); err != nil {
		return err
	}
	fmt.Fprintf(d.stdout, "   The sink received %d request(s) for it and applied it once.\n", d.sink.requests(demoUnknownKey))
	return nil
}

// settledOutcomes counts the outcomes that settle an input record (held
// ones are settled later, as applied or dead-lettered).
func settledOutcomes(s *processor.Stats) int64 {
	return s.Outcome(processor.OutcomeApplied) + s.Outcome(processor.OutcomeDuplicate) + s.Outcome(processor.OutcomeStale) + s.Outcome(processor.OutcomeConflict) + s.Outcome(processor.OutcomeInvalid)
}

// volume is part 2: n generated events, checked against an independent
// reference fold.
func (d *demo) volume(ctx context.Context, n int) error {
	a := d.a
	o := workload.Defaults()
	o.Events, o.Aggregates, o.Seed = n, max(n/10, 1), uint64(time.Now().UnixNano())
	brecs, exp := workload.Generate(o)
	before := settledOutcomes(a.Processor.Stats())
	fmt.Fprintf(d.stdout, "\n2. Producing %d generated records (%d events over %d cases, %d duplicates, reordering, late gaps,\n   stale writers, conflicts, invalid records; seed %d) ...\n", len(brecs), o.Events, o.Aggregates, exp.Duplicates, o.Seed)
	t0 := time.Now()
	if err := testkit.Produce(ctx, a.Brokers, d.cfg.Kafka.Input[0].Topic, brecs); err != nil {
		return err
	}
	target := before + int64(exp.Applied+exp.Duplicates+exp.Stale+exp.Conflicts+exp.Invalid)
	if err := testkit.WaitFor(ctx, 2*time.Minute, func() bool { return settledOutcomes(a.Processor.Stats()) >= target }); err != nil {
		return err
	}
	took := time.Since(t0)
	topic := d.cfg.Projections[0].Topic
	rows, err := testkit.ReadAll(ctx, a.Brokers, topic)
	if err != nil {
		return err
	}
	var mine []*kgo.Record
	for _, r := range rows {
		if _, ok := exp.Final[string(r.Key)]; ok {
			mine = append(mine, r)
		}
	}
	rep := testkit.CheckProjection(mine, exp.Final)
	verdict := "equals the reference fold"
	if !rep.OK() {
		verdict = "DIFFERS from the reference fold"
		d.mismatch++
	}
	fmt.Fprintf(d.stdout, "   processed in %s (%.0f records/s, produce included); projection %s:\n   %s\n",
		took.Round(time.Millisecond), float64(len(brecs))/took.Seconds(), verdict, rep)
	return nil
}

// allEffects is part 3: the side effects of everything so far, once the
// executor settled every intent enqueued. It returns that count.
func (d *demo) allEffects(ctx context.Context) (int64, error) {
	a := d.a
	enq := a.Processor.Stats().Effects("sla-breach-email", processor.IntentEnqueued)
	if err := testkit.WaitFor(ctx, 2*time.Minute, func() bool {
		es := a.Executor.Stats()
		return es.Effects("sla-breach-email", effect.Succeeded)+es.Effects("sla-breach-email", effect.Unknown)+es.Duplicates("sla-breach-email") >= enq
	}); err != nil {
		return 0, fmt.Errorf("waiting for the side effects: %w", err)
	}
	maxReq := d.sink.maxRequests()
	fmt.Fprintf(d.stdout, "\n3. Side effects: %d intents enqueued, %d keys called, %d applied by the sink; at most %d request(s) per key.\n",
		enq, d.sink.keys(), d.sink.appliedKeys(), maxReq)
	if maxReq > 1 {
		d.mismatch++
	}
	return enq, nil
}

// rebuild is part 4: the projection rebuilt from history into another topic
// with its side effects suppressed (enq were enqueued live), and diffed
// against the live one.
func (d *demo) rebuild(ctx context.Context, enq int64) error {
	proj, sink := d.cfg.Projections[0], d.sink
	const rebuilt = "demo.case-overview.rebuilt"
	before := sink.total()
	fmt.Fprintf(d.stdout, "\n4. Rebuilding %s from the start of %s into %s (side effects suppressed) ...\n", proj.Name, strings.Join(d.cfg.Kafka.InputNames(), ", "), rebuilt)
	res, err := rebuild.Run(ctx, rebuild.Options{Config: d.cfg, Projection: proj.Name, Topic: rebuilt, Brokers: d.a.Brokers, Logger: d.log})
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	fmt.Fprintf(d.stdout, "   %d records in %s (%.0f records/s); %d intents suppressed (live enqueued %d); the sink received %d requests from it.\n",
		res.Records, res.Duration.Round(time.Millisecond), res.Rate(), res.Suppressed["sla-breach-email"], enq, sink.total()-before)
	rep, err := rebuild.Diff(ctx, rebuild.DiffOptions{Brokers: d.a.Brokers, A: proj.Topic, B: rebuilt})
	if err != nil {
		return err
	}
	fmt.Fprintf(d.stdout, "   projector diff %s %s: %d equal, %d different, %d missing\n",
		proj.Topic, rebuilt, rep.Equal, rep.Different, rep.MissingInA+rep.MissingInB)
	if !rep.Identical() || sink.total() != before || res.Suppressed["sla-breach-email"] != enq {
		d.mismatch++
	}
	return nil
}

// demoUnknownKey is the idempotency key of CASE-1's SLA-breach email.
const demoUnknownKey = "email:case:CASE-1:sla-breach:v3"

// demoSink is the demo's webhook receiver. It honours Idempotency-Key: a key
// is applied once; hang makes the first call of one key apply and then stall
// past the webhook timeout (an unknown outcome).
type demoSink struct {
	*httptest.Server
	mu      sync.Mutex
	reqs    map[string]int
	applied map[string]bool
}

func newDemoSink(hangKey string) *demoSink {
	s := &demoSink{reqs: map[string]int{}, applied: map[string]bool{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		_, _ = io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		s.reqs[key]++
		n := s.reqs[key]
		s.applied[key] = true
		s.mu.Unlock()
		if key == hangKey && n == 1 {
			sleepCtx(r.Context(), 10*time.Second) // past the webhook timeout: no answer
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"msg-%d"}`, n)
	}))
	return s
}

func (s *demoSink) requests(key string) int { s.mu.Lock(); defer s.mu.Unlock(); return s.reqs[key] }
func (s *demoSink) keys() int               { s.mu.Lock(); defer s.mu.Unlock(); return len(s.reqs) }
func (s *demoSink) appliedKeys() int        { s.mu.Lock(); defer s.mu.Unlock(); return len(s.applied) }

// total is the number of requests received.
func (s *demoSink) total() int { return s.foldRequests(func(acc, n int) int { return acc + n }) }

// maxRequests is the most requests received for one key.
func (s *demoSink) maxRequests() int {
	return s.foldRequests(func(acc, n int) int { return max(acc, n) })
}

// foldRequests folds f over the request count of every key, from 0.
func (s *demoSink) foldRequests(f func(acc, n int) int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	acc := 0
	for _, n := range s.reqs {
		acc = f(acc, n)
	}
	return acc
}

// printLedger prints the demo key's ledger entry.
func printLedger(ctx context.Context, w *tabwriter.Writer, opts []kgo.Opt, cfg *config.Config) error {
	entries, err := ops.ReadLedger(ctx, opts, cfg.Name, cfg.Kafka.EffectsTopic)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Key != demoUnknownKey {
			continue
		}
		status := e.Status.String()
		if e.Resolution != nil {
			status += " (resolved: " + e.Resolution.Note + ")"
		}
		fmt.Fprintf(w, "   %s\t%s\tattempts %d\t%s\n", e.Key, e.Effect, e.Attempts, status)
	}
	return w.Flush()
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
