package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/configs"
	"github.com/projector-dev/projector/internal/app"
	"github.com/projector-dev/projector/internal/config"
	"github.com/projector-dev/projector/internal/testkit"
	"github.com/projector-dev/projector/internal/workload"
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
	fmt.Fprintf(stdout, "\nDone in %s. Side effects and rebuilds join this demo as they land (see README).\n", time.Since(start).Round(100*time.Millisecond))
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
