package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/operator/ops"
	sideeffect "github.com/projector-dev/projector/sideeffects/effect"
)

const effectsUsage = `Usage: projector effects <list|show|resolve> --config FILE [flags]

  list      the side-effect ledger, optionally by --status or --effect
  show KEY  one key's entry with its attempt history
  resolve KEY --as succeeded|failed [--note TEXT]
            settle an unknown outcome by hand (the executor applies it)

The ledger is read from its changelog topic, so these work while the
executor runs. Run 'projector effects <sub> --help' for the flags.`

func runEffects(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "--help" || args[0] == "-h" {
		fmt.Fprintln(stdout, effectsUsage)
		if len(args) == 0 {
			return usageError{"effects: a subcommand is required: list, show or resolve"}
		}
		return nil
	}
	switch args[0] {
	case "list":
		return effectsList(ctx, args[1:], stdout, stderr)
	case "show":
		return effectsShow(ctx, args[1:], stdout, stderr)
	case "resolve":
		return effectsResolve(ctx, args[1:], stdout, stderr)
	}
	return usageError{fmt.Sprintf("effects: unknown subcommand %q (want list, show or resolve)", args[0])}
}

// effectsSetup loads the config and connects to the brokers.
func effectsSetup(cf *commonFlags, stderr io.Writer) (*config.Config, []kgo.Opt, func(), error) {
	log, err := cf.logger(stderr)
	if err != nil {
		return nil, nil, nil, err
	}
	cfg, err := cf.load()
	if err != nil {
		return nil, nil, nil, err
	}
	copts, err := wiring.ClientOpts(&cfg.Kafka)
	if err != nil {
		return nil, nil, nil, err
	}
	brokers, closeFn, err := wiring.Connect(cfg, log)
	if err != nil {
		return nil, nil, nil, err
	}
	return cfg, append(copts, kgo.SeedBrokers(brokers...)), closeFn, nil
}

// readLedger connects as cf says and reads the side-effect ledger.
func readLedger(ctx context.Context, cf *commonFlags, stderr io.Writer) ([]sideeffect.Entry, error) {
	cfg, opts, closeFn, err := effectsSetup(cf, stderr)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	return ops.ReadLedger(ctx, opts, cfg.Name, cfg.Kafka.EffectsTopic)
}

func effectsList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("effects list", "  projector effects list --config configs/example.yaml --status unknown").withConfig(true)
	status := fs.String("status", "", "only entries with this status: pending, in-flight, succeeded, failed, unknown")
	effect := fs.String("effect", "", "only entries of this effect")
	asJSON := fs.Bool("json", false, "print JSON lines instead of a table")
	if err := fs.parse(args, stdout); err != nil {
		return err
	}
	var want sideeffect.Status
	if *status != "" {
		s, err := sideeffect.ParseStatus(*status)
		if err != nil {
			return usageError{"--status: " + err.Error()}
		}
		want = s
	}
	entries, err := readLedger(ctx, &fs.common, stderr)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	if !*asJSON {
		fmt.Fprintln(w, "KEY\tEFFECT\tSTATUS\tATTEMPTS\tUPDATED\tREF")
	}
	n := 0
	for _, e := range entries {
		if (want != 0 && e.Status != want) || (*effect != "" && e.Effect != *effect) {
			continue
		}
		n++
		if *asJSON {
			b, _ := json.Marshal(e)
			fmt.Fprintln(stdout, string(b))
			continue
		}
		status := e.Status.String()
		if e.Resolution != nil {
			status += " (resolved)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\n", e.Key, e.Effect, status, e.Attempts, e.Updated.UTC().Format(time.RFC3339), e.Ref)
	}
	w.Flush()
	if !*asJSON {
		fmt.Fprintf(stdout, "%d entries\n", n)
	}
	return nil
}

func effectsShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("effects show", "  projector effects show --config configs/example.yaml 'email:case:CASE-1:sla-breach:v3'").withConfig(true).takes(1)
	if err := fs.parse(args, stdout); err != nil {
		return err
	}
	key := fs.Arg(0)
	entries, err := readLedger(ctx, &fs.common, stderr)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Key == key {
			b, _ := json.MarshalIndent(e, "", "  ")
			fmt.Fprintln(stdout, string(b))
			return nil
		}
	}
	return fmt.Errorf("effects show: no ledger entry for key %q", key)
}

func effectsResolve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("effects resolve", "  projector effects resolve --config configs/example.yaml 'email:case:CASE-1:sla-breach:v3' --as succeeded --note 'confirmed with the mail provider'").withConfig(true).takes(1)
	as := fs.String("as", "", "the outcome to record: succeeded or failed (required)")
	note := fs.String("note", "", fmt.Sprintf("why (kept in the ledger; at most %d bytes)", sideeffect.MaxNoteBytes))
	wait := fs.Duration("timeout", 30*time.Second, "how long to wait for the executor to apply it (0: do not wait)")
	if err := fs.parse(args, stdout); err != nil {
		return err
	}
	key := fs.Arg(0)
	outcome, err := sideeffect.ParseStatus(*as)
	if err != nil || (outcome != sideeffect.Succeeded && outcome != sideeffect.Failed) {
		return usageError{"--as: want succeeded or failed"}
	}
	if len(*note) > sideeffect.MaxNoteBytes { // the ledger would cut it: say so now
		return usageError{fmt.Sprintf("--note: at most %d bytes, got %d", sideeffect.MaxNoteBytes, len(*note))}
	}
	cfg, opts, closeFn, err := effectsSetup(&fs.common, stderr)
	if err != nil {
		return err
	}
	defer closeFn()
	find := func() (*sideeffect.Entry, error) {
		entries, err := ops.ReadLedger(ctx, opts, cfg.Name, cfg.Kafka.EffectsTopic)
		if err != nil {
			return nil, err
		}
		for i := range entries {
			if entries[i].Key == key {
				return &entries[i], nil
			}
		}
		return nil, nil
	}
	e, err := find()
	if err != nil {
		return err
	}
	if e == nil {
		return fmt.Errorf("effects resolve: no ledger entry for key %q", key)
	}
	if e.Status != sideeffect.Unknown {
		return fmt.Errorf("effects resolve: key %q is %s; only unknown outcomes can be resolved", key, e.Status)
	}
	if err := ops.SendResolve(ctx, opts, cfg.Kafka.EffectsTopic, key, outcome, *note); err != nil {
		return err
	}
	if *wait <= 0 {
		fmt.Fprintf(stdout, "resolve of %q sent; the executor applies it\n", key)
		return nil
	}
	var resolved *sideeffect.Entry
	err = ops.Await(ctx, *wait, 300*time.Millisecond, func() (bool, error) {
		e, err := find()
		if e != nil && e.Resolution != nil {
			resolved = e
		}
		return resolved != nil, err
	})
	switch {
	case err == nil:
		fmt.Fprintf(stdout, "%s: resolved as %s\n", key, resolved.Status)
	case errors.Is(err, ops.ErrNotApplied):
		fmt.Fprintf(stdout, "resolve of %q sent; no executor applied it within %s: it is applied when the executor runs\n", key, *wait)
	case ctx.Err() != nil:
		// Stopped while waiting; the resolve is already sent.
	default:
		return err // reading the ledger failed
	}
	return nil
}
