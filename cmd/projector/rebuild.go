package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/operator/rebuild"
)

const rebuildExample = `  projector rebuild --config configs/example.yaml --projection case-overview --topic case-overview.v2
  projector rebuild --config configs/example.yaml --projection case-overview --topic case-overview.v2 --from 2026-06-01T00:00:00Z
  projector diff --config configs/example.yaml --topic case-overview.v1 --topic case-overview.v2

The rebuild runs beside the live worker under its own consumer group
(<name>-rebuild-<topic>), transactional ids, changelog and state directory
(<state.dir>/rebuild-<topic>); side effects are never called, only counted
as suppressed. It exits 0 once it has reached the input's end offsets taken
at its start. Stopped (SIGTERM/SIGINT) or killed, the same command resumes
where it left off; each run takes the end offsets anew at its own start and
its summary counts its own work.`

// runRebuild is `projector rebuild`: replay the input into a new projection
// topic with side effects suppressed, until the end offsets taken at start.
func runRebuild(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("rebuild", rebuildExample).withConfig(true)
	cf := &fs.common
	proj := fs.String("projection", "", "the configured projection to rebuild (may be omitted when there is only one)")
	topic := fs.String("topic", "", "the new projection topic to write (required; not the live one)")
	from := fs.String("from", "", "start at this time instead of the earliest offsets: RFC 3339, a date (UTC) or Unix milliseconds; only for a new rebuild (a resumed one continues from its committed offsets)")
	dlq := fs.String("dead-letter-topic", "", "dead-letter topic of the rebuild (default <topic>.dlq; the live one already has the live dead letters)")
	progress := fs.String("progress", "auto", "progress display: auto (a bar on a terminal, else lines), bar, lines or none")
	interval := fs.Duration("progress-interval", rebuild.DefaultProgressInterval, "interval of progress lines")
	httpListen := fs.String("http", "off", "serve /metrics, /healthz and /readyz of the rebuild on this host:port")
	if err := fs.parse(args, stdout); err != nil {
		return err
	}
	if *topic == "" {
		return usageError{"rebuild: --topic NEW_TOPIC is required"}
	}
	var start time.Time
	if *from != "" {
		t, err := parseTime(*from)
		if err != nil {
			return usageError{"rebuild: --from: " + err.Error()}
		}
		start = t
	}
	mode, err := rebuild.ParseProgressMode(*progress, stdout)
	if err != nil {
		return usageError{"rebuild: --progress: " + err.Error()}
	}
	if *interval <= 0 {
		return usageError{"rebuild: --progress-interval must be positive"}
	}
	pr := rebuild.NewProgress(stdout, mode, *interval)
	log, err := cf.logger(pr.LogWriter(stderr))
	if err != nil {
		return err
	}
	cfg, err := cf.load()
	if err != nil {
		return err
	}
	res, err := rebuild.Run(ctx, rebuild.Options{
		Config: cfg, Projection: *proj, Topic: *topic, From: start, DeadLetterTopic: *dlq,
		HTTPListen: *httpListen, Progress: pr, Logger: log,
	})
	var oe *rebuild.OptionError
	if errors.As(err, &oe) {
		return usageError{oe.Error()}
	}
	if res == nil && err != nil && ctx.Err() != nil {
		// Stopped while connecting, before the processor ran.
		fmt.Fprintln(stdout, "stopped before the rebuild started; run the same command again to resume")
		return nil
	}
	if res != nil {
		res.WriteSummary(stdout)
	}
	if err != nil {
		if res != nil {
			fmt.Fprintln(stdout, "failed; fix the cause and run the same command again to resume")
		}
		return err
	}
	if !res.Completed {
		fmt.Fprintln(stdout, "stopped; run the same command again to resume")
		return nil
	}
	fmt.Fprintf(stdout, "check it before cutting readers over:\n  projector diff --config %s --topic %s --topic %s\n",
		cf.config, liveTopic(cfg.Projections, res.Projection), res.Topic)
	return nil
}

// parseTime accepts RFC 3339, a date (UTC) or Unix milliseconds.
func parseTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil && ms >= 0 {
		return time.UnixMilli(ms), nil
	}
	return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time (2026-06-28T10:15:30Z), a date (2026-06-28) or Unix milliseconds", s)
}

// liveTopic is the configured topic of projection name.
func liveTopic(ps []config.Projection, name string) string {
	for _, p := range ps {
		if p.Name == name {
			return p.Topic
		}
	}
	return "LIVE_TOPIC"
}
