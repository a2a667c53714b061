package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/configs"
	"github.com/projector-dev/projector/internal/app"
	"github.com/projector-dev/projector/internal/config"
	"github.com/projector-dev/projector/internal/rebuild"
	"github.com/projector-dev/projector/internal/receipt"
	"github.com/projector-dev/projector/internal/testkit"
	"github.com/projector-dev/projector/internal/workload"
	"github.com/projector-dev/projector/sideeffects"
)

// sample is one hand-written demo record and the outcome it must get.
type sample struct {
	key, value, expect, why string
}

func ev(id, typ, agg string, version int, payload string) string {
	return fmt.Sprintf(`{"eventId":%q,"eventType":%q,"aggregateId":%q,"aggregateType":"RegulatoryCase","aggregateVersion":%d,"occurredAt":"2026-06-28T10:15:30Z","payload":%s}`,
		id, typ, agg, version, payload)
}

// demoSamples is the demo's story, in production order.
func demoSamples() []sample {
	return []sample{
		{"CASE-1", ev("e1-1", "CaseOpened", "CASE-1", 1, `{"status":"OPEN","title":"Late filing"}`), "applied", "in order"},
		{"CASE-1", ev("e1-2", "CaseUpdated", "CASE-1", 2, `{"owner":"ana"}`), "applied", "in order"},
		{"CASE-1", ev("e1-3", "CaseEscalated", "CASE-1", 3, `{"status":"ESCALATED","reasonCode":"SLA_BREACH"}`), "applied", "in order"},
		{"CASE-2", ev("e2-1", "CaseOpened", "CASE-2", 1, `{"status":"OPEN","title":"Missing report"}`), "applied", "reordered"},
		{"CASE-2", ev("e2-3", "CaseEscalated", "CASE-2", 3, `{"status":"ESCALATED","reasonCode":"CUSTOMER"}`), "held", "v3 before v2: held"},
		{"CASE-2", ev("e2-2", "CaseUpdated", "CASE-2", 2, `{"owner":"ben"}`), "applied", "v2 arrives: applied, v3 drains"},
		{"CASE-3", ev("e3-1", "CaseOpened", "CASE-3", 1, `{"status":"OPEN"}`), "applied", "duplicated"},
		{"CASE-3", ev("e3-2", "CaseUpdated", "CASE-3", 2, `{"owner":"cy","tags":["kyc","aml"]}`), "applied", "duplicated"},
		{"CASE-3", `{ "payload": {"tags":["kyc","aml"], "owner":"cy"}, "aggregateVersion": 2.0, "aggregateType":"RegulatoryCase",
			"aggregateId":"CASE-3", "eventType":"CaseUpdated", "eventId":"e3-2" }`, "duplicate", "re-serialised copy"},
		{"CASE-3", ev("e3-1", "CaseOpened", "CASE-3", 1, `{"status":"OPEN"}`), "duplicate", "client retry"},
		{"CASE-4", ev("e4-1", "CaseOpened", "CASE-4", 1, `{"status":"OPEN"}`), "applied", "gap never filled"},
		{"CASE-4", ev("e4-3", "CaseUpdated", "CASE-4", 3, `{"owner":"dee"}`), "held", "v2 never comes: dead-lettered after gaps.holdTimeout"},
		{"CASE-5", ev("e5-1", "CaseOpened", "CASE-5", 1, `{"status":"OPEN"}`), "applied", "conflict"},
		{"CASE-5", ev("e5-1", "CaseOpened", "CASE-5", 1, `{"status":"CLOSED"}`), "conflict", "same eventId, other payload"},
		{"CASE-6", ev("e6-1", "CaseOpened", "CASE-6", 1, `{"status":"OPEN"}`), "applied", "deleted"},
		{"CASE-6", ev("e6-2", "CaseClosed", "CASE-6", 2, `null`), "applied", "delete rule: tombstone"},
		{"CASE-1", ev("e1-x", "CaseUpdated", "CASE-1", 2, `{"owner":"zed"}`), "stale", "a second writer at an old version"},
		{"bad-1", `this is not JSON`, "invalid", "poison"},
		{"bad-2", `{"eventId":"","eventType":"CaseOpened","aggregateId":"CASE-9","aggregateVersion":1}`, "invalid", "empty eventId"},
		{"bad-3", `{"eventId":"e9-1","eventType":"CaseOpened","aggregateVersion":1}`, "invalid", "no aggregateId"},
		{"bad-4", `{"eventId":"e9-2","eventType":"CaseOpened","aggregateId":"CASE-9","aggregateVersion":0}`, "invalid", "version 0"},
	}
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := pflag.NewFlagSet("demo", pflag.ContinueOnError)
	bulk := fs.Int("bulk", 20000, "events in the generated bulk phase (0 skips it)")
	keep := fs.String("dir", "", "keep the broker and state in this directory (default: a temporary one, removed at the end)")
	logLevel := fs.String("log-level", "warn", "log level of the worker: debug, info, warn, error")
	if err := parse(fs, args, stdout, "  projector demo\n  projector demo --bulk 100000 --log-level info"); err != nil {
		return err
	}
	cf := commonFlags{logLevel: *logLevel, logFormat: "text"}
	log, err := cf.logger(stderr)
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
	cfg, err := config.Parse(configs.Demo, os.LookupEnv)
	if err != nil {
		return fmt.Errorf("demo configuration: %w", err)
	}
	cfg.State.Dir = filepath.Join(dir, "state")
	cfg.Kafka.EmbeddedBroker.Dir = filepath.Join(dir, "broker")
	cfg.Kafka.MaxRecordsPerTransaction = 1000
	// The side effects go to a local sink that honours Idempotency-Key. Its
	// first call for CASE-1's escalation applies the effect and then hangs
	// past the webhook timeout: an unknown outcome, parked for the operator.
	sink := newDemoSink(demoUnknownKey)
	defer sink.Close()
	for i := range cfg.SideEffects {
		cfg.SideEffects[i].Webhook.URL = sink.URL
		cfg.SideEffects[i].OnUnknown = config.OnUnknownPark
	}
	a, err := app.New(cfg, app.Options{Logger: log})
	if err != nil {
		return err
	}
	defer a.Close()
	input := cfg.Kafka.Input[0]
	proj := cfg.Projections[0]
	w := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintf(stdout, "projector demo: embedded single-node broker at %s, state in %s\n\n", a.Brokers[0], dir)

	// The worker runs for the whole demo.
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	defer func() {
		stop()
		<-done
	}()
	if err := testkit.CreateTopic(ctx, a.Brokers, input, int32(cfg.Kafka.EmbeddedBroker.Partitions)); err != nil {
		return err
	}

	// Part 1: the story.
	samples := demoSamples()
	var recs []workload.Record
	want := map[string]int64{}
	for _, s := range samples {
		recs = append(recs, workload.Record{Key: []byte(s.key), Value: []byte(s.value)})
		want[s.expect]++
	}
	want["applied"]++ // CASE-2 v3 is applied when v2 closes its gap
	fmt.Fprintf(stdout, "1. Producing %d records to %s: 6 cases in order, reordered, duplicated (one re-serialised),\n   with a gap that is never filled, a conflicting event id, a deletion, a stale writer and 4 poison records.\n\n", len(recs), input)
	if err := testkit.Produce(ctx, a.Brokers, input, recs); err != nil {
		return err
	}
	if err := waitFor(ctx, 30*time.Second, func() bool { return a.Processor.Stats().DeadLetters("gap-timeout") >= 1 }); err != nil {
		return fmt.Errorf("waiting for the gap timeout: %w", err)
	}
	st := a.Processor.Stats()
	fmt.Fprintln(w, "   outcome\texpected\tactual\t")
	mismatch := 0
	for _, o := range []string{"applied", "duplicate", "stale", "held", "conflict", "invalid"} {
		got := st.Outcome(o)
		mark := ""
		if got != want[o] {
			mark = "  <- MISMATCH"
			mismatch++
		}
		fmt.Fprintf(w, "   %s\t%d\t%d\t%s\n", o, want[o], got, mark)
	}
	w.Flush()

	rows, err := testkit.ReadAll(ctx, a.Brokers, proj.Topic)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n   Projection %s (committed; last record per key):\n", proj.Topic)
	last := map[string]*kgo.Record{}
	for _, r := range rows {
		last[string(r.Key)] = r
	}
	keys := make([]string, 0, len(last))
	for k := range last {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		r := last[k]
		if r.Value == nil {
			fmt.Fprintf(w, "   %s\t(deleted: tombstone)\t\n", k)
			continue
		}
		var v testkit.ProjectionValue
		_ = json.Unmarshal(r.Value, &v)
		fmt.Fprintf(w, "   %s\tv%d\t%s\n", k, v.Version, v.State)
	}
	w.Flush()
	dlRecs, err := testkit.ReadAll(ctx, a.Brokers, cfg.Kafka.DeadLetterTopic)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n   Dead letters on %s (%d):\n", cfg.Kafka.DeadLetterTopic, len(dlRecs))
	for _, d := range testkit.DeadLetters(dlRecs) {
		fmt.Fprintf(w, "   %s\t%s\t%s\n", d.Reason, d.Source, d.Error)
	}
	w.Flush()

	// Side effects of part 1: one SLA-breach email, whose call timed out.
	if err := waitFor(ctx, 30*time.Second, func() bool {
		return a.Executor.Stats().Effects("sla-breach-email", "unknown") >= 1
	}); err != nil {
		return fmt.Errorf("waiting for the side effect: %w", err)
	}
	opts := []kgo.Opt{kgo.SeedBrokers(a.Brokers...)}
	fmt.Fprintf(stdout, "\n   Side effects: CASE-1's SLA breach produced intent %q; the sink applied it and then\n   hung past the webhook timeout, so the outcome is unknown and parked (onUnknown: park):\n", demoUnknownKey)
	if err := printLedger(ctx, w, opts, cfg); err != nil {
		return err
	}
	if err := sideeffects.SendResolve(ctx, opts, cfg.Kafka.EffectsTopic, demoUnknownKey, sideeffects.Succeeded, "the sink confirms it sent the email"); err != nil {
		return err
	}
	if err := waitFor(ctx, 30*time.Second, func() bool {
		return a.Executor.Stats().Effects("sla-breach-email", "resolved") >= 1
	}); err != nil {
		return fmt.Errorf("waiting for the resolve: %w", err)
	}
	fmt.Fprintf(stdout, "\n   Resolved by hand (what 'projector effects resolve KEY --as succeeded' does):\n")
	if err := printLedger(ctx, w, opts, cfg); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "   The sink received %d request(s) for it and applied it once.\n", sink.requests(demoUnknownKey))

	// The HTTP ingress: a request, its retry and a changed payload.
	if a.Ingress != nil {
		if err := demoIngress(ctx, stdout, a); err != nil {
			return err
		}
	}

	// Part 2: volume, checked against an independent reference fold.
	if *bulk > 0 {
		o := workload.Defaults()
		o.Events, o.Aggregates, o.Seed = *bulk, max(*bulk/10, 1), uint64(time.Now().UnixNano())
		brecs, exp := workload.Generate(o)
		before := st.Outcome("applied") + st.Outcome("duplicate") + st.Outcome("stale") + st.Outcome("conflict") + st.Outcome("invalid")
		fmt.Fprintf(stdout, "\n2. Producing %d generated records (%d events over %d cases, %d duplicates, reordering, late gaps,\n   stale writers, conflicts, invalid records; seed %d) ...\n", len(brecs), o.Events, o.Aggregates, exp.Duplicates, o.Seed)
		t0 := time.Now()
		if err := testkit.Produce(ctx, a.Brokers, input, brecs); err != nil {
			return err
		}
		target := before + int64(exp.Applied+exp.Duplicates+exp.Stale+exp.Conflicts+exp.Invalid)
		if err := waitFor(ctx, 2*time.Minute, func() bool {
			s := a.Processor.Stats()
			return s.Outcome("applied")+s.Outcome("duplicate")+s.Outcome("stale")+s.Outcome("conflict")+s.Outcome("invalid") >= target
		}); err != nil {
			return err
		}
		took := time.Since(t0)
		rows, err := testkit.ReadAll(ctx, a.Brokers, proj.Topic)
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
			mismatch++
		}
		fmt.Fprintf(stdout, "   processed in %s (%.0f records/s, produce included); projection %s:\n   %s\n",
			took.Round(time.Millisecond), float64(len(brecs))/took.Seconds(), verdict, rep)
	}
	// Side effects of everything so far, then a rebuild from history.
	enq := a.Processor.Stats().Effects("sla-breach-email", "enqueued")
	if err := waitFor(ctx, 2*time.Minute, func() bool {
		es := a.Executor.Stats()
		return es.Effects("sla-breach-email", "succeeded")+es.Effects("sla-breach-email", "unknown")+es.Effects("sla-breach-email", "duplicate") >= enq
	}); err != nil {
		return fmt.Errorf("waiting for the side effects: %w", err)
	}
	maxReq := sink.maxRequests()
	fmt.Fprintf(stdout, "\n3. Side effects: %d intents enqueued, %d keys called, %d applied by the sink; at most %d request(s) per key.\n",
		enq, sink.keys(), sink.appliedKeys(), maxReq)
	if maxReq > 1 {
		mismatch++
	}
	before := sink.total()
	fmt.Fprintf(stdout, "\n4. Rebuilding %s from the start of %s into demo.case-overview.rebuilt (side effects suppressed) ...\n", proj.Name, input)
	res, err := rebuild.Run(ctx, rebuild.Options{Config: cfg, Projection: proj.Name, Topic: "demo.case-overview.rebuilt", Brokers: a.Brokers, Logger: log})
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	fmt.Fprintf(stdout, "   %d records in %s (%.0f records/s); %d intents suppressed (live enqueued %d); the sink received %d requests from it.\n",
		res.Records, res.Duration.Round(time.Millisecond), res.Rate(), res.Suppressed["sla-breach-email"], enq, sink.total()-before)
	rep, err := rebuild.Diff(ctx, rebuild.DiffOptions{Brokers: a.Brokers, A: proj.Topic, B: "demo.case-overview.rebuilt"})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "   projector diff %s demo.case-overview.rebuilt: %d equal, %d different, %d missing\n",
		proj.Topic, rep.Equal, rep.Different, rep.MissingInA+rep.MissingInB)
	if !rep.Identical() || sink.total() != before || res.Suppressed["sla-breach-email"] != enq {
		mismatch++
	}
	fmt.Fprintf(stdout, "\nDone in %s.\n", time.Since(start).Round(100*time.Millisecond))
	if mismatch > 0 {
		return fmt.Errorf("demo: %d checks did not match", mismatch)
	}
	return nil
}

// waitFor polls cond until it holds, the worker stops, or the time is up.
func waitFor(ctx context.Context, within time.Duration, cond func() bool) error {
	deadline := time.After(within)
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("timed out after %s", within)
		case <-time.After(50 * time.Millisecond):
		}
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
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
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
func (s *demoSink) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.reqs {
		n += v
	}
	return n
}
func (s *demoSink) maxRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := 0
	for _, v := range s.reqs {
		m = max(m, v)
	}
	return m
}

// printLedger prints the demo key's ledger entry.
func printLedger(ctx context.Context, w *tabwriter.Writer, opts []kgo.Opt, cfg *config.Config) error {
	entries, err := sideeffects.ReadLedger(ctx, opts, cfg.Name, cfg.Kafka.EffectsTopic)
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

// demoIngress posts one event through the HTTP ingress, retries it
// re-serialised (replayed from the committed receipt) and then sends the
// same key with another payload (refused).
func demoIngress(ctx context.Context, stdout io.Writer, a *app.App) error {
	if err := waitFor(ctx, 30*time.Second, func() bool { ok, _ := a.Ingress.Ready(); return ok }); err != nil {
		return fmt.Errorf("waiting for the ingress: %w", err)
	}
	url := "http://" + a.Ingress.Addr().String() + "/v1/events"
	send := func(body string) (int, string, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
		if err != nil {
			return 0, "", nil, err
		}
		req.Header.Set("Idempotency-Key", "order-7")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), b, err
	}
	first := `{"eventType":"CaseOpened","aggregateId":"CASE-7","aggregateType":"RegulatoryCase","aggregateVersion":1,"payload":{"status":"OPEN","amount":120}}`
	retry := `{ "payload": {"amount": 120.0, "status": "OPEN"}, "aggregateVersion": 1, "aggregateType": "RegulatoryCase", "aggregateId": "CASE-7", "eventType": "CaseOpened" }`
	changed := strings.Replace(first, "120", "999", 1)
	c1, _, b1, err := send(first)
	if err != nil {
		return err
	}
	c2, replayed, b2, err := send(retry)
	if err != nil {
		return err
	}
	c3, _, _, err := send(changed)
	if err != nil {
		return err
	}
	// "No new event": the input topic holds one record from the ingress.
	recs, err := testkit.ReadAll(ctx, a.Brokers, a.Config.Kafka.Input[0])
	if err != nil {
		return err
	}
	written := 0
	for _, rec := range recs {
		for _, h := range rec.Headers {
			if h.Key == receipt.Header {
				written++
			}
		}
	}
	var r struct{ EventID, Outcome string }
	_ = json.Unmarshal(b1, &r)
	same := "same body"
	if !bytes.Equal(b1, b2) {
		same = "DIFFERENT body"
	}
	fmt.Fprintf(stdout, "\n   HTTP ingress (POST /v1/events, Idempotency-Key: order-7):\n")
	fmt.Fprintf(stdout, "   first request      %d  %s as %s\n", c1, r.Outcome, r.EventID)
	fmt.Fprintf(stdout, "   retry, reordered   %d  replayed=%s, %s, %d event(s) written in all\n", c2, replayed, same, written)
	fmt.Fprintf(stdout, "   changed payload    %d  refused\n", c3)
	if c1 != http.StatusCreated || c2 != http.StatusOK || replayed != "true" || !bytes.Equal(b1, b2) || c3 != http.StatusConflict || written != 1 {
		return fmt.Errorf("demo: the ingress answered %d, %d (replayed %q), %d and wrote %d events; want 201, 200 (replayed, same body), 409 and 1", c1, c2, replayed, c3, written)
	}
	return nil
}
