package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/operator/ops"
)

const gapsUsage = `Usage of projector gaps:
  projector gaps list [flags]            aggregates with held events: versions held and missing, since when
  projector gaps skip AGGREGATE [flags]  apply an aggregate's held events past its gap (recorded)

Run 'projector gaps list --help' or 'projector gaps skip --help' for the flags.

Example:
  projector gaps list --config configs/example.yaml
  projector gaps skip CASE-4 --config configs/example.yaml --note "v2 lost upstream, INC-123"
`

// runGaps is `projector gaps list|skip`.
func runGaps(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, gapsUsage)
		return usageError{"gaps: want a subcommand: list or skip"}
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, gapsUsage)
		return pflag.ErrHelp
	case "list":
		return runGapsList(ctx, args[1:], stdout, stderr)
	case "skip":
		return runGapsSkip(ctx, args[1:], stdout, stderr)
	}
	return usageError{fmt.Sprintf("gaps: unknown subcommand %q (want list or skip)", args[0])}
}

// opsSession is what an operator command needs to reach the processor's
// topics: the configuration, brokers and client options.
type opsSession struct {
	cfg    *config.Config
	target ops.Target
	close  func()
	sasl   *saslWatch
}

// saslWatch notices a failed SASL exchange. Real brokers answer bad
// credentials with SASL_AUTHENTICATION_FAILED, which the client names; some
// (the embedded kfake among them) close the connection instead, which the
// client reports as a bare EOF.
type saslWatch struct{ failed atomic.Bool }

func (w *saslWatch) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e kgo.BrokerE2E) {
	if key == int16(kmsg.SASLAuthenticate) && e.Err() != nil {
		w.failed.Store(true)
	}
}

// explain names the cause of err when a SASL exchange failed.
func (s *opsSession) explain(err error) error {
	k := &s.cfg.Kafka
	if err == nil || !s.sasl.failed.Load() || k.SASL == nil {
		return err
	}
	return fmt.Errorf("SASL authentication failed (mechanism %s, user %q): the broker rejected the credentials "+
		"(check kafka.sasl.username and kafka.sasl.password): %w", k.SASL.Mechanism, k.SASL.Username, err)
}

// connect loads the configuration and connects to the brokers (starting the
// embedded broker from its data directory when no worker serves it).
func (cf *commonFlags) connect(stderr io.Writer, proj string) (*opsSession, error) {
	log, err := cf.logger(stderr)
	if err != nil {
		return nil, err
	}
	cfg, err := cf.load()
	if err != nil {
		return nil, err
	}
	if proj != "" {
		found := false
		var names []string
		for _, p := range cfg.Projections {
			found = found || p.Name == proj
			names = append(names, p.Name)
		}
		if !found {
			return nil, usageError{fmt.Sprintf("--projection: %q is not a configured projection (have %s)", proj, strings.Join(names, ", "))}
		}
	}
	copts, err := wiring.ClientOpts(&cfg.Kafka)
	if err != nil {
		return nil, err
	}
	brokers, closeFn, err := wiring.Connect(cfg, log)
	if err != nil {
		return nil, err
	}
	w := &saslWatch{}
	return &opsSession{cfg: cfg, close: closeFn, sasl: w, target: ops.Target{
		Brokers: brokers, ClientOpts: append(copts, kgo.WithHooks(w)), Group: cfg.Name, Inputs: cfg.Kafka.InputNames(),
	}}, nil
}

// read reads the committed state; a broker that cannot be reached fails
// within timeout instead of retrying forever.
func (s *opsSession) read(ctx context.Context, timeout time.Duration, q ops.Query) (*ops.State, error) {
	st, err := s.readBounded(ctx, timeout, q)
	return st, s.explain(err)
}

// readBounded is read without naming a failed SASL exchange (for callers
// that explain the error they end with).
func (s *opsSession) readBounded(ctx context.Context, timeout time.Duration, q ops.Query) (*ops.State, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := ops.Read(ctx, s.target, q)
	if err != nil && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("reading the changelogs of %s took longer than %s (brokers %s): %w",
			s.cfg.Name, timeout, strings.Join(s.target.Brokers, ","), err)
	}
	return st, err
}

func runGapsList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("gaps list", "  projector gaps list --config configs/example.yaml\n  projector gaps list --config configs/example.yaml --projection case-overview --json").withConfig(true)
	proj := fs.String("projection", "", "only this projection (default: all)")
	asJSON := fs.Bool("json", false, "print JSON (one object per aggregate with held events, one per line)")
	timeout := fs.Duration("timeout", time.Minute, "give up reading the changelogs after this long")
	if err := fs.parse(args, stdout); err != nil {
		return err
	}
	s, err := fs.common.connect(stderr, *proj)
	if err != nil {
		return err
	}
	defer s.close()
	st, err := s.read(ctx, *timeout, ops.Query{Projection: *proj})
	if err != nil {
		return err
	}
	gaps := st.Gaps()
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, a := range gaps {
			if err := enc.Encode(gapJSON{a, a.Missing()}); err != nil {
				return err
			}
		}
		return nil
	}
	if len(gaps) == 0 {
		fmt.Fprintf(stdout, "no held events: every aggregate is in order (%d changelog records read)\n", st.Records)
		return nil
	}
	now := time.Now()
	w := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PROJECTION\tAGGREGATE\tPARTITION\tVERSION\tHELD\tMISSING\tHELD SINCE\tAGE")
	for _, a := range gaps {
		held := make([]string, len(a.Held))
		for i, h := range a.Held {
			held[i] = fmt.Sprint(h.Version)
		}
		since, age := "-", "-"
		if !a.HeldSince.IsZero() {
			since = a.HeldSince.UTC().Format(time.RFC3339)
			age = now.Sub(a.HeldSince).Round(time.Second).String()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", a.Projection, a.Aggregate, a.Task(), a.Version,
			strings.Join(held, ","), strings.Join(a.Missing(), ","), since, age)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\n%d aggregate(s) with held events. To apply them past the gap: projector gaps skip AGGREGATE --config ...\n", len(gaps))
	return nil
}

type gapJSON struct {
	*ops.Aggregate
	Missing []string `json:"missing"`
}

func runGapsSkip(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	example := "  projector gaps skip CASE-4 --config configs/example.yaml --note \"v2 lost upstream, INC-123\"\n  projector gaps skip CASE-4 --config configs/example.yaml --projection case-overview --no-wait"
	fs := newFlags("gaps skip", example).withConfig(true)
	proj := fs.String("projection", "", "only this projection (default: every projection holding events of the aggregate)")
	note := fs.String("note", "", "why: recorded with the command and logged by the worker")
	noWait := fs.Bool("no-wait", false, "send the command and return without waiting for the worker to apply it")
	timeout := fs.Duration("timeout", 30*time.Second, "how long to wait for the worker to apply the command")
	force := fs.Bool("force", false, "send the command even if the committed state shows no held events (keyed by AGGREGATE to each input topic)")
	agg, s, err := fs.aggregateSession(args, stdout, stderr, proj, "gaps skip: want the aggregate id: projector gaps skip AGGREGATE --config FILE")
	if err != nil {
		return err
	}
	defer s.close()
	done, err := ops.SkipGapAndWait(ctx, s.target, ops.Skip{
		Projection: *proj, Aggregate: agg, Note: *note, Force: *force, NoWait: *noWait, Timeout: *timeout,
		Read: func(ctx context.Context, q ops.Query) (*ops.State, error) {
			return s.readBounded(ctx, time.Minute, q)
		},
		Holding: func(a *ops.Aggregate) {
			fmt.Fprintf(stdout, "%s %s on %s: version %d, holding %d event(s) (missing %s)\n",
				a.Projection, a.Aggregate, a.Task(), a.Version, len(a.Held), strings.Join(a.Missing(), ","))
		},
		Sent: func(d ops.Sent) { fmt.Fprintf(stdout, "skip-gap command for %s sent to %s\n", agg, d) },
	})
	return s.printSkipped(stdout, agg, *proj, *timeout, *noWait, done, err)
}

// printSkipped says how a skip-gap ended.
func (s *opsSession) printSkipped(stdout io.Writer, agg, proj string, timeout time.Duration, noWait bool, done *ops.Skipped, err error) error {
	switch {
	case errors.Is(err, ops.ErrNothingHeld):
		return fmt.Errorf("gaps skip: %s holds no events in the committed state of %s%s; nothing to skip "+
			"(if the worker has not consumed the events yet, --force sends the command anyway)", agg, s.cfg.Name, forProjection(proj))
	case errors.Is(err, ops.ErrNotApplied):
		return fmt.Errorf("gaps skip: the worker did not apply the command within %s; it is queued on the input topic "+
			"(a worker that is behind applies it when it reaches it; a command that finds nothing to skip is dead-lettered to %s)",
			timeout, s.cfg.Kafka.DeadLetterTopic)
	case err != nil:
		return s.explain(err) // the reads' errors and SkipGap's
	case noWait:
		fmt.Fprintln(stdout, "not waiting (--no-wait): the partition's owner applies it in order with the events")
	case done.Queued != nil:
		fmt.Fprintf(stdout, "no worker is running in group %s (state %s): the command is queued and will be applied when the processor runs\n", s.cfg.Name, done.Queued.State)
	case done.NothingToWait:
		fmt.Fprintln(stdout, "the committed state held nothing to wait for (--force); check with: projector inspect "+agg)
	default:
		printApplied(stdout, done.Before, done.After)
	}
	return nil
}

// printApplied lists each aggregate's version before and after the skip.
func printApplied(stdout io.Writer, before, after *ops.State) {
	was := map[string]int64{}
	for _, a := range before.Aggregates {
		was[a.Projection+" "+a.Task()] = a.Version
	}
	for _, a := range after.Aggregates {
		fmt.Fprintf(stdout, "applied: %s %s on %s: version %d -> %d, %d event(s) still held",
			a.Projection, a.Aggregate, a.Task(), was[a.Projection+" "+a.Task()], a.Version, len(a.Held))
		if m := a.Missing(); len(m) > 0 {
			fmt.Fprintf(stdout, " (missing %s)", strings.Join(m, ","))
		}
		fmt.Fprintln(stdout)
	}
}

// aggregateSession parses the flags of a command that takes the aggregate
// id as its first argument (usage when it is missing) and connects for
// projection *proj.
func (fs *cmdFlags) aggregateSession(args []string, stdout, stderr io.Writer, proj *string, usage string) (string, *opsSession, error) {
	var agg string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		agg, args = args[0], args[1:]
	}
	if err := fs.parse(args, stdout); err != nil {
		return "", nil, err
	}
	if agg == "" {
		return "", nil, usageError{usage}
	}
	s, err := fs.common.connect(stderr, *proj)
	return agg, s, err
}

func forProjection(p string) string {
	if p == "" {
		return ""
	}
	return " for projection " + p
}
