package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/projector-dev/projector/internal/harness/bench"
)

const benchExample = `  projector bench
  projector bench ingress   (the HTTP ingress: see projector bench ingress --help)
  projector bench restore   (a fresh worker's restore: see projector bench restore --help)
  projector bench latency   (end-to-end latency at 10/50/90% load: see projector bench latency --help)
  projector bench --runs 3
  projector bench --runs 3 --floor-records 2
  projector bench --events 20000 --aggregates 2000 --batch 1000`

// runBench is `projector bench`: the transport floor and the full pipeline on
// the same generated events, on one broker, in one process.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "ingress" {
		return runBenchIngress(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "restore" {
		return runBenchRestore(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "latency" {
		return runBenchLatency(ctx, args[1:], stdout, stderr)
	}
	o := bench.Defaults()
	fs := newFlags("bench", benchExample).withLogLevel("warn", "processor")
	fs.IntVar(&o.Events, "events", o.Events, "unique valid events to generate")
	fs.IntVar(&o.Aggregates, "aggregates", o.Aggregates, "aggregates the events are spread over")
	fs.Float64Var(&o.Duplicates, "duplicates", o.Duplicates, "re-delivered copies, as a share of --events")
	fs.Float64Var(&o.Reorder, "reorder", o.Reorder, "events swapped with their next version, as a share of --events")
	fs.Float64Var(&o.LateGaps, "late-gaps", o.LateGaps, "events moved ~2000 records later (gaps filled late), as a share of --events")
	fs.Float64Var(&o.Stale, "stale", o.Stale, "stale writers (new id, old version), as a share of --events")
	fs.Float64Var(&o.Conflicts, "conflicts", o.Conflicts, "reused event ids with another payload, as a share of --events")
	fs.Float64Var(&o.Invalid, "invalid", o.Invalid, "malformed records, as a share of --events")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "workload seed")
	fs.IntVar(&o.Partitions, "partitions", o.Partitions, "input topic partitions")
	fs.IntVar(&o.Batch, "batch", o.Batch, "max records per transaction (both phases)")
	fs.IntVar(&o.Runs, "runs", o.Runs, "repetitions of floor + pipeline; the median ratio is reported")
	fs.IntVar(&o.FloorRecords, "floor-records", o.FloorRecords, "with N > 1, each run also times a floor that writes N copies of every input record (the transport the pipeline's own output needs); the ratio stays against the one-record floor")
	fs.IntVar(&o.Chunk, "chunk", o.Chunk, "events generated at a time: larger workloads are generated in chunks of disjoint aggregates to bound memory")
	brokers := fs.String("brokers", "", "comma-separated brokers of an external cluster (default: the embedded broker in this process)")
	fs.StringVar(&o.Dir, "dir", "", "directory for the embedded broker's log and the state stores (default: a temporary one, removed at the end)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of the first run's pipeline phase to this file")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	if err := fs.parse(args, stdout); err != nil {
		return err
	}
	if *brokers != "" {
		for _, b := range strings.Split(*brokers, ",") {
			if b = strings.TrimSpace(b); b != "" {
				o.Brokers = append(o.Brokers, b)
			}
		}
	}
	if err := positive(fs, "events", "aggregates", "partitions", "batch", "runs", "floor-records", "chunk"); err != nil {
		return err
	}
	var err error
	if o.Logger, o.Progress, err = benchOutputs(fs, "bench", o.Validate, *quiet, stderr); err != nil {
		return err
	}
	res, err := bench.Execute(ctx, o)
	if err != nil {
		return err
	}
	res.Print(stdout)
	return res.Err()
}

// benchOutputs is what every bench mode does between its flags and its run:
// the options' check (validate, an error named for mode is a usage error),
// the processor's logger, and the progress lines unless quiet.
func benchOutputs(fs *cmdFlags, mode string, validate func() error, quiet bool, stderr io.Writer) (*slog.Logger, io.Writer, error) {
	if err := validate(); err != nil {
		return nil, nil, usageError{mode + ": " + err.Error()}
	}
	log, err := fs.common.logger(stderr)
	if err != nil {
		return nil, nil, err
	}
	if quiet {
		return log, nil, nil
	}
	return log, stderr, nil
}

// positive checks that the named int flags are > 0.
func positive(fs *cmdFlags, names ...string) error {
	for _, n := range names {
		v, err := fs.GetInt(n)
		if err != nil {
			return err
		}
		if v <= 0 {
			return usageError{fmt.Sprintf("bench: --%s must be positive, got %d", n, v)}
		}
	}
	return nil
}

// runBenchIngress is `projector bench ingress`: the HTTP ingress's
// throughput and latency at several numbers of concurrent clients.
func runBenchIngress(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultIngressOptions()
	fs := newFlags("bench ingress", "  projector bench ingress\n  projector bench ingress --clients 1,16,64 --requests 2000 --runs 3\n  projector bench ingress --auth none,token,jwt --runs 3").withLogLevel("warn", "worker")
	fs.StringVar(&o.Dir, "dir", "", "directory for the embedded broker's log and the state (default: a temporary one, removed at the end)")
	fs.IntSliceVar(&o.Clients, "clients", o.Clients, "concurrent clients, one level after another")
	fs.IntVar(&o.Requests, "requests", o.Requests, "requests per run and level (each a new key)")
	fs.IntVar(&o.Runs, "runs", o.Runs, "runs per level; the medians are reported")
	fs.IntVar(&o.Partitions, "partitions", o.Partitions, "input topic partitions")
	fs.StringSliceVar(&o.Auth, "auth", o.Auth, "the ingress's authentication, one or more of none (auth: none), token (a bearer token per client from a tokens file, and a per-tenant rate limit that never refuses), jwt (an ES256 JWT per client, reused, verified against a JWKS file); several are measured alternately, run by run")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of each measured run of every --auth mode but none to FILE.<mode>-r<run>-c<clients> (go tool pprof merges them)")
	if err := fs.parse(args, stdout); err != nil {
		return err
	}
	for _, a := range o.Auth {
		if a != bench.AuthNone && a != bench.AuthToken && a != bench.AuthJWT {
			return usageError{fmt.Sprintf("bench ingress: --auth: want none, token or jwt, got %q", a)}
		}
	}
	if err := positive(fs, "requests", "runs", "partitions"); err != nil {
		return err
	}
	for _, c := range o.Clients {
		if c <= 0 {
			return usageError{fmt.Sprintf("bench ingress: --clients must be positive, got %d", c)}
		}
	}
	if len(o.Clients) == 0 {
		return usageError{"bench ingress: --clients needs at least one level"}
	}
	log, err := fs.common.logger(stderr)
	if err != nil {
		return err
	}
	o.Logger = log
	res, err := bench.Ingress(ctx, o)
	if err != nil {
		return err
	}
	res.Print(stdout)
	return nil
}

const benchRestoreExample = `  projector bench restore
  projector bench restore --aggregates 1000000,10000000 --dir /var/tmp/restore
  projector bench restore --aggregates 100000 --runs 3 --cpuprofile /tmp/restore.prof
  projector bench restore --aggregates 10000000 --dir /var/tmp/r10m --setup-only
  projector bench restore --aggregates 10000000 --dir /var/tmp/r10m --binary /tmp/projector-base
  projector bench restore --aggregates 1000000 --dir /var/tmp/r1m --standby`

// runBenchRestore is `projector bench restore`: a fresh worker (this binary,
// `projector run`, in a child process) restores N aggregates' state from
// the changelog; time to ready, records/s, its peak RSS and its state
// directory's bytes per aggregate.
func runBenchRestore(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultRestoreOptions()
	fs := newFlags("bench restore", benchRestoreExample).withLogLevel("warn", "setup worker")
	fs.IntSliceVar(&o.Aggregates, "aggregates", o.Aggregates, "aggregates whose state is restored (one event each), one size after another")
	fs.IntVar(&o.Partitions, "partitions", o.Partitions, "input (and changelog) partitions")
	fs.IntVar(&o.Runs, "runs", o.Runs, "fresh workers per size; the medians are reported (with --standby: takeovers per size, each reported)")
	fs.IntVar(&o.Chunk, "chunk", o.Chunk, "events generated at a time (chunks of disjoint aggregates, to bound the setup's memory)")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "workload seed")
	fs.StringVar(&o.Dir, "dir", "", "directory for the broker's log, the state directories and the workers' logs (default: a temporary one, removed at the end); a setup finished there is reused by later invocations with the same options")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile of each worker, start to exit, to FILE.<aggregates>-r<run>")
	fs.StringVar(&o.Binary, "binary", "", "the projector binary each measured worker runs (default: this one), to compare builds on one setup")
	fs.BoolVar(&o.SetupOnly, "setup-only", false, "set each size up in --dir and stop: a later invocation with the same --dir and options reuses it")
	fs.BoolVar(&o.Standby, "standby", false, "per run, measure a standby replica's takeover instead: worker A restores alone, worker B joins (state.standbyReplicas 1) and copies A's half, A is killed (SIGKILL), B takes over; reuses a setup made without it")
	fs.DurationVar(&o.SessionTimeout, "session-timeout", bench.DefaultStandbySession, "the workers' kafka.sessionTimeout with --standby (the kill is noticed after it)")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	if err := fs.parse(args, stdout); err != nil {
		return err
	}
	if err := positive(fs, "partitions", "runs", "chunk"); err != nil {
		return err
	}
	var err error
	if o.Logger, o.Progress, err = benchOutputs(fs, "bench restore", o.Validate, *quiet, stderr); err != nil {
		return err
	}
	res, err := bench.Restore(ctx, o)
	if err != nil {
		return err
	}
	res.Print(stdout)
	return res.Err()
}
