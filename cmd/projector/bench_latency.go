package main

import (
	"context"
	"io"

	"github.com/projector-dev/projector/internal/harness/bench"
)

const benchLatencyExample = `  projector bench latency                        (measures the maximum rate first)
  projector bench latency --rate 150000 --loads 10,50,90 --duration 20s
  projector bench latency --runs 3 --events 200000 --aggregates 20000`

// runBenchLatency is `projector bench latency`: end-to-end latency (input
// record to projection record) at fractions of the pipeline's maximum rate.
func runBenchLatency(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o := bench.DefaultLatencyOptions()
	fs := newFlags("bench latency", benchLatencyExample).withLogLevel("warn", "processor")
	fs.Float64Var(&o.Rate, "rate", 0, "the maximum rate, input records/s (default: measured first, as projector bench measures the pipeline, on --events pre-produced events)")
	fs.IntSliceVar(&o.Loads, "loads", o.Loads, "load levels, in percent of the maximum rate, one after another")
	fs.DurationVar(&o.Duration, "duration", o.Duration, "how long each level produces, warm-up included")
	fs.DurationVar(&o.Warmup, "warmup", o.Warmup, "dropped from the start of each level")
	fs.DurationVar(&o.Drain, "drain", o.Drain, "how long to wait, after the last record, for the outputs of every applied event")
	fs.IntVar(&o.Events, "events", o.Events, "unique valid events of the maximum-rate measurement (with --aggregates: the events per aggregate of every level)")
	fs.IntVar(&o.Aggregates, "aggregates", o.Aggregates, "aggregates the maximum-rate measurement's events are spread over")
	fs.Float64Var(&o.Duplicates, "duplicates", o.Duplicates, "re-delivered copies, as a share of the events")
	fs.Float64Var(&o.Reorder, "reorder", o.Reorder, "events swapped with their next version, as a share of the events")
	fs.Float64Var(&o.LateGaps, "late-gaps", o.LateGaps, "events moved ~2000 records later, as a share of the events")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "workload seed")
	fs.IntVar(&o.Partitions, "partitions", o.Partitions, "input topic partitions")
	fs.IntVar(&o.Batch, "batch", o.Batch, "max records per transaction (the processor's MaxRecordsPerTxn)")
	fs.IntVar(&o.Runs, "runs", o.Runs, "repetitions of every level (the maximum rate is measured once)")
	fs.IntVar(&o.Chunk, "chunk", o.Chunk, "events generated at a time (chunks of disjoint aggregates, to bound memory)")
	fs.StringVar(&o.Dir, "dir", "", "directory for the embedded broker's log and the state stores (default: a temporary one, removed at the end)")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	if err := fs.parse(args, stdout); err != nil {
		return err
	}
	if err := positive(fs, "events", "aggregates", "partitions", "batch", "runs", "chunk"); err != nil {
		return err
	}
	var err error
	if o.Logger, o.Progress, err = benchOutputs(fs, "bench latency", o.Validate, *quiet, stderr); err != nil {
		return err
	}
	res, err := bench.Latency(ctx, o)
	if err != nil {
		return err
	}
	res.Print(stdout)
	return nil
}
