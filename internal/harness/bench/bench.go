// Package bench is `projector bench`: on one broker, in one process, it
// measures the transport floor – a plain exactly-once copy loop with the
// processor's client settings – and the full pipeline on the same generated
// events, and checks the pipeline's outcome counts against the workload's
// reference fold so that a fast wrong run is visible.
//
// A run goes:
//
//  1. setup (not timed): generate the workload (in chunks of disjoint
//     aggregates when it is large, so the generator's memory stays bounded),
//     produce it to the input topic, then release the generated records and
//     reset the process's peak-RSS mark;
//  2. per repetition: (a) the floor: a GroupTransactSession that copies every
//     input record to an output topic, timed from start until its group has
//     committed the end of every input partition; (a') with FloorRecords > 1,
//     the same loop writing that many copies of each input record (to as many
//     topics): the transport that the pipeline's own output volume needs;
//     (b) the pipeline: the real processor (fresh state directory, live mode)
//     on the same input in another group, timed the same way;
//  3. report events/s of both (input records / wall time), their ratio, p50/p99
//     transaction latency, the records written and the CPU time per input
//     record, peak RSS and the outcome counts.
package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/projector-dev/projector/internal/app/broker"
	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
)

// Options configure a benchmark. Zero values take the defaults of Defaults.
type Options struct {
	Events     int     // unique valid events (default 1M)
	Aggregates int     // default 100k
	Duplicates float64 // share of Events re-delivered (default 0.10)
	Reorder    float64 // share of Events swapped with their next version (default 0.01)
	// The rarer faults, each a share of Events (zero: none).
	LateGaps, Stale, Conflicts, Invalid float64
	Seed                                uint64

	Partitions int // input partitions (default 4)
	Batch      int // max records per transaction, both phases (default 5000)
	Runs       int // repetitions of floor + pipeline (default 1)
	// FloorRecords > 1 adds a second floor per run that writes this many
	// copies of every input record: the transport cost of the pipeline's
	// output volume (it writes about two records per event). The ratio stays
	// pipeline over the one-record floor.
	FloorRecords int
	// Chunk is how many events are generated at a time (default 1M). Larger
	// workloads are generated as several chunks of disjoint aggregates.
	Chunk int

	// Brokers, when set, is an external cluster to use instead of the
	// embedded broker (the peak RSS then excludes the broker).
	Brokers []string
	// Dir holds the embedded broker's log and the state stores; "" makes a
	// temporary directory that is removed at the end.
	Dir string
	// CPUProfile, when set, receives a CPU profile of the pipeline phases.
	CPUProfile string
	// Logger receives the processor's logs (default: discarded).
	Logger *slog.Logger
	// Progress receives one line per step (default: discarded).
	Progress io.Writer
}

// Defaults are the default benchmark.
func Defaults() Options {
	return Options{Events: 1_000_000, Aggregates: 100_000, Duplicates: 0.10, Reorder: 0.01,
		LateGaps: 0.001, Stale: 0.001, Conflicts: 0.001, Invalid: 0.001, Seed: 1,
		Partitions: 4, Batch: 5000, Runs: 1, FloorRecords: 1, Chunk: 1_000_000}
}

func (o *Options) applyDefaults() {
	d := Defaults()
	o.Events = config.OrDefault(o.Events, d.Events)
	if o.Aggregates <= 0 {
		o.Aggregates = max(1, min(d.Aggregates, o.Events/10))
	}
	o.Partitions = config.OrDefault(o.Partitions, d.Partitions)
	o.Batch = config.OrDefault(o.Batch, d.Batch)
	o.Runs = config.OrDefault(o.Runs, d.Runs)
	o.Chunk = config.OrDefault(o.Chunk, d.Chunk)
	o.FloorRecords = config.OrDefault(o.FloorRecords, d.FloorRecords)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// Validate reports options that cannot run.
func (o Options) Validate() error {
	var errs []error
	for _, r := range []struct {
		flag  string
		share float64
	}{
		{"duplicates", o.Duplicates}, {"reorder", o.Reorder}, {"late-gaps", o.LateGaps},
		{"stale", o.Stale}, {"conflicts", o.Conflicts}, {"invalid", o.Invalid},
	} {
		if r.share < 0 || r.share > 1 {
			errs = append(errs, fmt.Errorf("--%s: %g is not between 0 and 1 (a share of --events)", r.flag, r.share))
		}
	}
	if o.Events < 0 || o.Aggregates < 0 || o.Partitions < 0 || o.Batch < 0 || o.Runs < 0 || o.Chunk < 0 || o.FloorRecords < 0 {
		errs = append(errs, errors.New("counts must not be negative"))
	}
	if o.Events > 0 && o.Aggregates > o.Events {
		errs = append(errs, fmt.Errorf("--aggregates %d is more than --events %d (every aggregate has at least one event)", o.Aggregates, o.Events))
	}
	if o.FloorRecords > 16 {
		errs = append(errs, fmt.Errorf("--floor-records %d is above 16", o.FloorRecords))
	}
	if o.Partitions > 1024 {
		errs = append(errs, fmt.Errorf("--partitions %d is above 1024", o.Partitions))
	}
	return errors.Join(errs...)
}

// Outcomes are the outcome labels compared, in report order.
var Outcomes = []string{"applied", "duplicate", "stale", "held", "conflict", "invalid", "failed"}

// Phase is one timed phase of one run.
type Phase struct {
	Name     string
	Records  int64         // input records processed (committed)
	Elapsed  time.Duration // start until the group caught up
	Txns     int64         // committed transactions
	Aborted  int64         // aborted transactions (retried)
	P50, P99 time.Duration // committed-transaction latency
	// Written counts the records the phase's clients wrote (acknowledged by
	// the broker; with aborted transactions, theirs too).
	Written int64
	// CPU is the process's CPU time (user + system) over the phase: the
	// phase's own work plus, with the embedded broker, the broker's.
	CPU time.Duration
}

// PerRecord is CPU time per input record.
func (p Phase) PerRecord() time.Duration {
	if p.Records == 0 {
		return 0
	}
	return p.CPU / time.Duration(p.Records)
}

// Cores is CPU time over wall time: how many cores the phase kept busy.
func (p Phase) Cores() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return p.CPU.Seconds() / p.Elapsed.Seconds()
}

// WrittenPerRecord is records written per input record.
func (p Phase) WrittenPerRecord() float64 {
	if p.Records == 0 {
		return 0
	}
	return float64(p.Written) / float64(p.Records)
}

// Rate is input records per second.
func (p Phase) Rate() float64 {
	if p.Elapsed <= 0 {
		return 0
	}
	return float64(p.Records) / p.Elapsed.Seconds()
}

// Run is one repetition: the floor, then the pipeline.
type Run struct {
	Floor, Pipeline Phase
	// FloorN is the floor writing Options.FloorRecords copies of every record
	// (nil when FloorRecords is 1).
	FloorN *Phase
	// Got are the pipeline's committed outcome counts (by Outcomes label).
	Got map[string]int64
}

// Ratio is pipeline events/s over floor events/s.
func (r Run) Ratio() float64 {
	if r.Floor.Rate() == 0 {
		return 0
	}
	return r.Pipeline.Rate() / r.Floor.Rate()
}

// FloorNRatio is the many-record floor's events/s over the floor's (0
// without one).
func (r Run) FloorNRatio() float64 {
	if r.FloorN == nil || r.Floor.Rate() == 0 {
		return 0
	}
	return r.FloorN.Rate() / r.Floor.Rate()
}

// Result is a whole benchmark.
type Result struct {
	Options  Options
	Input    int64            // records on the input topic
	Want     map[string]int64 // expected outcome counts (reference fold)
	Runs     []Run
	Embedded bool // the broker ran in this process
	// Setup timings (not part of the figures).
	Generate, Produce time.Duration
	// PeakRSS is the process's VmHWM over the measured phases (reset after
	// setup when the kernel allows it); SetupRSS the peak before the reset.
	PeakRSS, SetupRSS int64
	PeakReset         bool
	// CPUProfile is the written profile's path ("" when none).
	CPUProfile string
}

// MedianRatio is the median over runs of pipeline/floor.
func (r *Result) MedianRatio() float64 { return r.medianOf(Run.Ratio) }

// MedianFloorNRatio is the median over runs of FloorNRatio (0 without a
// many-record floor).
func (r *Result) MedianFloorNRatio() float64 { return r.medianOf(Run.FloorNRatio) }

func (r *Result) medianOf(f func(Run) float64) float64 {
	rs := make([]float64, 0, len(r.Runs))
	for _, run := range r.Runs {
		rs = append(rs, f(run))
	}
	return median(rs)
}

// Mismatches lists every (run, outcome) whose count differs from the
// expectation, and every floor that did not copy every record.
func (r *Result) Mismatches() []string {
	var out []string
	for i, run := range r.Runs {
		for _, o := range Outcomes {
			if got, want := run.Got[o], r.Want[o]; got != want {
				out = append(out, fmt.Sprintf("run %d: outcome %s: got %d, want %d", i+1, o, got, want))
			}
		}
		if run.Floor.Records != r.Input {
			out = append(out, fmt.Sprintf("run %d: transport floor copied %d records, want %d", i+1, run.Floor.Records, r.Input))
		}
		if run.FloorN != nil && run.FloorN.Records != r.Input {
			out = append(out, fmt.Sprintf("run %d: %s copied %d records, want %d", i+1, run.FloorN.Name, run.FloorN.Records, r.Input))
		}
	}
	return out
}

// Err is non-nil when the pipeline's counts were wrong in any run.
func (r *Result) Err() error {
	if m := r.Mismatches(); len(m) > 0 {
		return fmt.Errorf("bench: outcome counts differ from the reference fold (%d): %s", len(m), strings.Join(m, "; "))
	}
	return nil
}

const inputTopic = "bench.input"

// Execute runs the benchmark. It returns the result even when the outcome
// counts are wrong (see Result.Err); an error means it could not run.
func Execute(ctx context.Context, o Options) (*Result, error) {
	o.applyDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	res := &Result{Options: o, Want: map[string]int64{}}
	dir, cleanup, err := workDir(o.Dir, "projector-bench-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	brokers := o.Brokers
	prefix := ""
	if len(brokers) == 0 {
		b, err := broker.Start(broker.Options{Dir: filepath.Join(dir, "broker"), Listen: "127.0.0.1:0", Partitions: o.Partitions})
		if err != nil {
			return nil, err
		}
		defer b.Close()
		brokers = []string{b.Addr()}
		res.Embedded = true
	} else {
		// A shared cluster: names unique to this invocation.
		prefix = "projector-bench-" + strconv.FormatInt(time.Now().UnixNano(), 36) + "."
	}
	input := prefix + inputTopic

	// 1. Setup: generate and produce, chunk by chunk.
	if err := testkit.CreateTopic(ctx, brokers, input, int32(o.Partitions)); err != nil {
		return nil, fmt.Errorf("bench: create %s: %w", input, err)
	}
	if err := setup(ctx, o, brokers, input, res); err != nil {
		return nil, err
	}
	runtime.GC()
	debug.FreeOSMemory()
	res.SetupRSS = peakRSS()
	res.PeakReset = resetPeakRSS()

	// 2. The measured runs.
	var prof *os.File
	if o.CPUProfile != "" {
		f, err := os.Create(o.CPUProfile)
		if err != nil {
			return nil, fmt.Errorf("bench: --cpuprofile: %w", err)
		}
		defer f.Close()
		prof = f
		res.CPUProfile = o.CPUProfile
	}
	for i := range o.Runs {
		name := fmt.Sprintf("%sbench-r%d", prefix, i+1)
		fmt.Fprintf(o.Progress, "run %d/%d: transport floor ...\n", i+1, o.Runs)
		floor, err := copyLoop(ctx, o, brokers, input, name+"-floor", res.Input, 1)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(o.Progress, "run %d/%d: transport floor %s, %.0f events/s\n", i+1, o.Runs, floor.Elapsed.Round(time.Millisecond), floor.Rate())
		var floorN *Phase
		if o.FloorRecords > 1 {
			ph, err := copyLoop(ctx, o, brokers, input, name+"-floor"+strconv.Itoa(o.FloorRecords), res.Input, o.FloorRecords)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(o.Progress, "run %d/%d: %s %s, %.0f events/s\n", i+1, o.Runs, ph.Name, ph.Elapsed.Round(time.Millisecond), ph.Rate())
			floorN = &ph
		}
		fmt.Fprintf(o.Progress, "run %d/%d: pipeline ...\n", i+1, o.Runs)
		if prof != nil {
			if err := pprof.StartCPUProfile(prof); err != nil {
				prof = nil // one profile per process; the first pipeline phase has it
			}
		}
		pipe, got, err := pipeline(ctx, o, brokers, input, name+"-pipeline", filepath.Join(dir, "state-"+strconv.Itoa(i+1)), res.Input)
		if prof != nil {
			pprof.StopCPUProfile()
			prof = nil
		}
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(o.Progress, "run %d/%d: pipeline %s, %.0f events/s\n", i+1, o.Runs, pipe.Elapsed.Round(time.Millisecond), pipe.Rate())
		res.Runs = append(res.Runs, Run{Floor: floor, FloorN: floorN, Pipeline: pipe, Got: got})
	}
	res.PeakRSS = peakRSS()
	return res, nil
}

// setup generates the workload chunk by chunk, produces each chunk and keeps
// only the expected counts.
func setup(ctx context.Context, o Options, brokers []string, input string, res *Result) error {
	chunks := (o.Events + o.Chunk - 1) / o.Chunk
	for c := range chunks {
		// Split events and aggregates evenly; the last chunk takes the rest.
		ev := o.Events / chunks
		ag := o.Aggregates / chunks
		if c == chunks-1 {
			ev = o.Events - ev*(chunks-1)
			ag = o.Aggregates - ag*(chunks-1)
		}
		t0 := time.Now()
		recs, exp := workload.Generate(o.workload(o.Seed+uint64(c), ev, ag))
		if c > 0 {
			renameChunk(recs, c)
		}
		res.Generate += time.Since(t0)
		for o, n := range map[string]int{"applied": exp.Applied, "duplicate": exp.Duplicates, "stale": exp.Stale,
			"held": exp.Held, "conflict": exp.Conflicts, "invalid": exp.Invalid} {
			res.Want[o] += int64(n)
		}
		res.Input += int64(len(recs))
		exp = workload.Expect{}
		fmt.Fprintf(o.Progress, "setup: chunk %d/%d: %d records generated; producing ...\n", c+1, chunks, len(recs))
		t0 = time.Now()
		if err := testkit.Produce(ctx, brokers, input, recs); err != nil {
			return err
		}
		res.Produce += time.Since(t0)
	}
	res.Want["failed"] = 0
	return nil
}

// workload is the generator's options for one chunk of ev events over ag
// aggregates: the workload.Defaults mix with o's shares.
func (o Options) workload(seed uint64, ev, ag int) workload.Options {
	wo := workload.Defaults()
	wo.Seed = seed
	wo.Events, wo.Aggregates = ev, max(ag, 1)
	wo.Duplicates, wo.Reorder = o.Duplicates, o.Reorder
	wo.LateGaps, wo.Stale, wo.Conflicts, wo.Invalid = max(o.LateGaps, 0), max(o.Stale, 0), max(o.Conflicts, 0), max(o.Invalid, 0)
	return wo
}

// renameChunk makes chunk c's aggregates and event ids disjoint from every
// other chunk's: the generator always names aggregates CASE-000000 …, and
// every id of an aggregate's events embeds that name ("CASE-000001-ev-3").
// "ASE-" is rewritten to "ASE<c>-", which also covers re-serialised copies
// ("\u0043ASE-…"); stale writers' ids get the chunk too.
func renameChunk(recs []workload.Record, c int) {
	agg := []byte("ASE" + strconv.Itoa(c) + "-")
	stale := []byte(`"stale` + strconv.Itoa(c) + "-")
	for i := range recs {
		r := &recs[i]
		r.Key = bytes.ReplaceAll(r.Key, []byte("ASE-"), agg)
		r.Value = bytes.ReplaceAll(r.Value, []byte("ASE-"), agg)
		if r.Kind == workload.KindStale {
			r.Value = bytes.ReplaceAll(r.Value, []byte(`"stale-`), stale)
		}
	}
}

// workDir is dir, or, when dir is "", a new temporary directory named after
// pattern that cleanup removes (cleanup leaves a given dir alone).
// workBroker is workDir with the embedded broker started in it (its log
// under broker/, partitions per topic by default, on a free loopback
// port); stop closes the broker, then cleans the directory up.
func workBroker(dir, pattern string, partitions int) (_ string, _ *broker.Embedded, stop func(), _ error) {
	dir, cleanup, err := workDir(dir, pattern)
	if err != nil {
		return "", nil, nil, err
	}
	b, err := broker.Start(broker.Options{Dir: filepath.Join(dir, "broker"), Listen: "127.0.0.1:0", Partitions: partitions})
	if err != nil {
		cleanup()
		return "", nil, nil, err
	}
	return dir, b, func() { b.Close(); cleanup() }, nil
}

func workDir(dir, pattern string) (_ string, cleanup func(), _ error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	d, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", nil, err
	}
	return d, func() { os.RemoveAll(d) }, nil
}
