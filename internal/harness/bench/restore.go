// `projector bench restore`: how fast a fresh instance, its state directory
// empty, restores the state of N aggregates from the changelog and becomes
// ready, and how much memory and disk that takes (issue 26).
//
// Per size:
//
//  1. setup (not timed): an embedded broker in this process (log on disk);
//     N events, one per aggregate, generated in chunks of disjoint
//     aggregates and produced to the input topic; the real worker (the
//     wiring of `projector run`, role processor, in this process, its own
//     state directory) runs over them until its group has committed the end
//     of the input, then stops. The broker then holds the changelog exactly
//     as the pipeline leaves it, and the setup's state directory is
//     deleted. The changelog's committed records are counted (read
//     read_committed): what a restore must read.
//  2. per run (timed): the projector binary itself is started as a child
//     process, `projector run --role processor`, with the same
//     configuration (name and kafka.instanceId: the static member takes
//     the partitions over at once) and an empty state.dir, talking to the
//     broker over TCP. Measured: process start until GET /readyz answers
//     200 (docs/contract.md#health-and-readiness: every assigned partition
//     restored), projector_restore_records_total from its /metrics then,
//     its VmHWM then (/proc/PID/status: its own memory alone) and, sampled
//     until it exits on SIGTERM (with code 0, or the run fails), over its
//     life; then the state directory's bytes.
//
// A run whose restored count differs from the changelog's count, or whose
// worker does not exit 0, is an error (RestoreResult.Err): a fast wrong
// restore is not a figure.

package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/projector-dev/projector/internal/app/broker"
	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
)

// RestoreOptions configure `projector bench restore`.
type RestoreOptions struct {
	// Aggregates are the sizes measured, one after another (default 1M).
	Aggregates []int
	Partitions int // input partitions (default 4)
	Runs       int // fresh workers per size; the medians are reported (default 1)
	// Chunk is how many events are generated at a time (default 1M).
	Chunk int
	Seed  uint64
	// Binary is the projector binary started as the worker ("" is this
	// program: os.Executable).
	Binary string
	// Dir holds the broker's log, the state directories and the workers'
	// logs; "" makes a temporary directory, removed at the end. A setup
	// finished in Dir (setupFile) is reused by a later Restore with the
	// same options: only the runs are measured again.
	Dir string
	// CPUProfile, when set, is the prefix of a CPU profile of each worker
	// (CPUProfile.<aggregates>-r<run>), written from its start until its
	// exit (PROJECTOR_CPUPROFILE; see cmd/projector).
	CPUProfile string
	// SetupOnly stops after the setup of each size (kept in Dir for later
	// invocations: see restoreSetup) without measuring a run.
	SetupOnly bool
	// Standby measures, instead of one fresh worker per run, the takeover
	// of a killed worker's partitions by its standby replica
	// (restore_standby.go). It is not part of the setup's identity: a setup
	// in Dir serves both modes.
	Standby bool
	// SessionTimeout is the workers' kafka.sessionTimeout in standby mode
	// (default DefaultStandbySession).
	SessionTimeout time.Duration
	Logger         *slog.Logger // the setup worker's logs (default: discarded)
	Progress       io.Writer    // one line per step (default: discarded)
}

// DefaultRestoreOptions are the figures of docs/performance.md.
func DefaultRestoreOptions() RestoreOptions {
	return RestoreOptions{Aggregates: []int{1_000_000}, Partitions: 4, Runs: 1, Chunk: 1_000_000, Seed: 1}
}

func (o *RestoreOptions) applyDefaults() {
	d := DefaultRestoreOptions()
	if len(o.Aggregates) == 0 {
		o.Aggregates = d.Aggregates
	}
	o.Partitions = config.OrDefault(o.Partitions, d.Partitions)
	o.Runs = config.OrDefault(o.Runs, d.Runs)
	o.Chunk = config.OrDefault(o.Chunk, d.Chunk)
	o.SessionTimeout = config.OrDefault(o.SessionTimeout, DefaultStandbySession)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// Validate reports options that cannot run.
func (o RestoreOptions) Validate() error {
	var errs []error
	for _, n := range o.Aggregates {
		if n <= 0 {
			errs = append(errs, fmt.Errorf("--aggregates must be positive, got %d", n))
		}
	}
	if o.Partitions < 0 || o.Runs < 0 || o.Chunk < 0 || o.SessionTimeout < 0 {
		errs = append(errs, errors.New("counts must not be negative"))
	}
	if o.Partitions > 1024 {
		errs = append(errs, fmt.Errorf("--partitions %d is above 1024", o.Partitions))
	}
	return errors.Join(errs...)
}

// RestoreRun is one fresh worker's restore.
type RestoreRun struct {
	// Ready is process start until GET /readyz first answered 200.
	Ready time.Duration
	// Restored is projector_restore_records_total once ready.
	Restored int64
	// ReadyRSS is the worker's VmHWM once ready (the restore's own peak);
	// PeakRSS its VmHWM over its whole life (sampled every 10 ms until it
	// exited), which also covers what it did after the restore (Pebble's
	// compactions of the restored data, the shutdown).
	ReadyRSS, PeakRSS int64
	// StateBytes is the sum of the file sizes under its state.dir after it
	// exited; SSTBytes of its Pebble tables alone (the rest is the WAL,
	// recycled WAL files, the manifest: about fixed, whatever the size).
	StateBytes, SSTBytes int64
	ExitCode             int
	Log                  string // the worker's log file
	// Floor is the transport floor measured just before the run: a plain
	// kgo consumer reading the same changelog (restoreFloor).
	Floor FloorRead
}

// FloorRatio is the run's time to ready over its floor's read time (0 when
// unknown).
func (r RestoreRun) FloorRatio() float64 {
	if r.Floor.Took <= 0 {
		return 0
	}
	return r.Ready.Seconds() / r.Floor.Took.Seconds()
}

// Rate is restored records per second of time to ready.
func (r RestoreRun) Rate() float64 {
	if r.Ready <= 0 {
		return 0
	}
	return float64(r.Restored) / r.Ready.Seconds()
}

// RestoreSize is every run of one size.
type RestoreSize struct {
	Aggregates int
	Input      int64 // input records (one event per aggregate)
	// Changelog is the changelog's committed records after the setup.
	Changelog int64
	// Setup timings (not part of the figures).
	Generate, Produce, Process time.Duration
	// BenchRSS is this process's RSS after the setup (the embedded
	// broker's, mostly), SetupPeak its VmHWM then (the generator's and the
	// setup worker's, with the broker).
	BenchRSS, SetupPeak int64
	Runs                []RestoreRun
	// Standby are the runs of the standby mode (RestoreOptions.Standby),
	// instead of Runs.
	Standby []StandbyRun `json:",omitempty"`
}

// Median is the median over runs of f.
func (s RestoreSize) Median(f func(RestoreRun) float64) float64 {
	v := make([]float64, 0, len(s.Runs))
	for _, r := range s.Runs {
		v = append(v, f(r))
	}
	return median(v)
}

// RestoreResult is a whole `projector bench restore`.
type RestoreResult struct {
	Options RestoreOptions
	Sizes   []RestoreSize
}

// Mismatches lists every run whose restored count differs from the
// changelog's, or whose worker did not exit 0 on SIGTERM.
func (r *RestoreResult) Mismatches() []string {
	var out []string
	for _, s := range r.Sizes {
		for i, run := range s.Runs {
			if run.Restored != s.Changelog {
				out = append(out, fmt.Sprintf("%d aggregates, run %d: restored %d records, the changelog holds %d", s.Aggregates, i+1, run.Restored, s.Changelog))
			}
			if run.ExitCode != 0 {
				out = append(out, fmt.Sprintf("%d aggregates, run %d: the worker exited %d on SIGTERM, want 0 (log: %s)", s.Aggregates, i+1, run.ExitCode, run.Log))
			}
		}
		for i, run := range s.Standby {
			for _, p := range run.problems(s.Changelog) {
				out = append(out, fmt.Sprintf("%d aggregates, standby run %d: %s", s.Aggregates, i+1, p))
			}
		}
	}
	return out
}

// Err is non-nil when any run was wrong (Mismatches).
func (r *RestoreResult) Err() error {
	if m := r.Mismatches(); len(m) > 0 {
		return fmt.Errorf("bench restore: %s", strings.Join(m, "; "))
	}
	return nil
}

// Restore runs the benchmark. It returns the result even when a run was
// wrong (see RestoreResult.Err); an error means it could not run.
func Restore(ctx context.Context, o RestoreOptions) (*RestoreResult, error) {
	o.applyDefaults()
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Binary == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("bench restore: the projector binary: %w", err)
		}
		o.Binary = self
	}
	dir, cleanup, err := workDir(o.Dir, "projector-bench-restore-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	res := &RestoreResult{Options: o}
	for _, n := range o.Aggregates {
		s, err := restoreSize(ctx, o, filepath.Join(dir, "n"+strconv.Itoa(n)), n)
		if err != nil {
			return nil, err
		}
		res.Sizes = append(res.Sizes, s)
	}
	return res, nil
}

const restoreName = "bench-restore"

// restoreConfig is the worker's configuration, the setup's and the
// measured ones' alike but for kafka.instanceId, state.dir, http.listen
// and what the standby mode adds to the kafka and state sections
// (kafka.sessionTimeout, state.standbyReplicas).
const restoreConfig = `name: ` + restoreName + `
kafka:
  brokers: [%s]
  instanceId: %s
  input: [` + inputTopic + `]
%sstate: {dir: %q%s}
http: {listen: %q}
projections:
  - name: case-overview
    topic: ` + restoreName + `.case-overview
    aggregateTypes: [RegulatoryCase]
    versioned: true
    events: {CaseOpened: merge, CaseUpdated: merge, CaseEscalated: merge, CaseClosed: delete}
`

// restoreSize sets one size up on its own broker (or reuses the setup an
// earlier invocation left in dir: restoreSetup) and measures its runs.
func restoreSize(ctx context.Context, o RestoreOptions, dir string, n int) (RestoreSize, error) {
	s := RestoreSize{Aggregates: n}
	prepared, err := loadSetup(dir, o, n)
	if err != nil {
		return s, err
	}
	b, err := broker.Start(broker.Options{Dir: filepath.Join(dir, "broker"), Listen: "127.0.0.1:0", Partitions: o.Partitions})
	if err != nil {
		return s, err
	}
	defer b.Close()
	if prepared != nil {
		s = *prepared
		fmt.Fprintf(o.Progress, "setup: %d aggregates: reusing the broker log of %s (%d input records, %d changelog records)\n", n, dir, s.Input, s.Changelog)
	} else if err := restoreSetup(ctx, o, b, dir, &s); err != nil {
		return s, err
	}
	if o.SetupOnly {
		return s, nil
	}
	if o.Standby {
		for i := range o.Runs {
			run, err := standbyRun(ctx, o, b.Addr(), dir, n, s.Changelog, i+1)
			if err != nil {
				return s, err
			}
			s.Standby = append(s.Standby, run)
		}
		return s, nil
	}
	for i := range o.Runs {
		floor, err := restoreFloor(ctx, b.Addr())
		if err != nil {
			return s, err
		}
		fmt.Fprintf(o.Progress, "%d aggregates, run %d/%d: floor: a plain consumer read %d committed changelog records in %s (%.0f/s); a fresh worker restores ...\n",
			n, i+1, o.Runs, floor.Records, floor.Took.Round(time.Millisecond), floor.Rate())
		run, err := restoreRun(ctx, o, b.Addr(), dir, n, i+1)
		if err != nil {
			return s, err
		}
		run.Floor = floor
		fmt.Fprintf(o.Progress, "%d aggregates, run %d/%d: ready in %s, %d records restored (%.0f/s, %.2f× the floor's time), RSS %s when ready, peak %s\n",
			n, i+1, o.Runs, run.Ready.Round(time.Millisecond), run.Restored, run.Rate(), run.FloorRatio(), mib(run.ReadyRSS), mib(run.PeakRSS))
		if floor.Records != s.Changelog {
			return s, fmt.Errorf("bench restore: the floor read %d changelog records, the setup counted %d", floor.Records, s.Changelog)
		}
		s.Runs = append(s.Runs, run)
	}
	return s, nil
}

// restoreSetup produces the input to b, runs the setup worker over it and
// counts the changelog it leaves, then records the setup in dir
// (saveSetup) for a later invocation with the same --dir to reuse.
func restoreSetup(ctx context.Context, o RestoreOptions, b *broker.Embedded, dir string, s *RestoreSize) error {
	n := s.Aggregates
	brokers := []string{b.Addr()}
	if err := testkit.CreateTopic(ctx, brokers, inputTopic, int32(o.Partitions)); err != nil {
		return fmt.Errorf("bench restore: create %s: %w", inputTopic, err)
	}
	if err := restoreProduce(ctx, o, brokers, s); err != nil {
		return err
	}
	fmt.Fprintf(o.Progress, "setup: %d aggregates: running the worker over %d events ...\n", n, s.Input)
	if err := restoreProcess(ctx, o, brokers, filepath.Join(dir, "setup-state"), s); err != nil {
		return err
	}
	// The changelog is counted by the floor's read (the same committed
	// records every run's floor then reads again).
	count, err := restoreFloor(ctx, b.Addr())
	if err != nil {
		return err
	}
	s.Changelog = count.Records
	// What the broker (and the rest of this process) holds while the
	// workers run: the setup's generator and worker are gone.
	s.SetupPeak = peakRSS()
	runtime.GC()
	debug.FreeOSMemory()
	s.BenchRSS = procStatus("self", "VmRSS")
	fmt.Fprintf(o.Progress, "setup: %d aggregates: processed in %s; the changelog holds %d records (counted in %s); this process's RSS (the broker's) now %s\n",
		n, s.Process.Round(time.Millisecond), s.Changelog, count.Took.Round(time.Millisecond), mib(s.BenchRSS))
	return saveSetup(dir, o, *s)
}

// restoreProduce generates the input, one event per aggregate, in chunks
// of disjoint aggregates, and produces it.
func restoreProduce(ctx context.Context, o RestoreOptions, brokers []string, s *RestoreSize) error {
	chunks := (s.Aggregates + o.Chunk - 1) / o.Chunk
	for c := range chunks {
		ag := s.Aggregates / chunks
		if c == chunks-1 {
			ag = s.Aggregates - ag*(chunks-1)
		}
		// Every aggregate one CaseOpened, nothing else: N aggregates with
		// state, each written once.
		wo := workload.Options{Seed: o.Seed + uint64(c), Events: ag, Aggregates: ag}
		t0 := time.Now()
		recs, _ := workload.Generate(wo)
		if c > 0 {
			renameChunk(recs, c)
		}
		s.Generate += time.Since(t0)
		s.Input += int64(len(recs))
		fmt.Fprintf(o.Progress, "setup: %d aggregates: chunk %d/%d: %d records generated; producing ...\n", s.Aggregates, c+1, chunks, len(recs))
		t0 = time.Now()
		if err := testkit.Produce(ctx, brokers, inputTopic, recs); err != nil {
			return err
		}
		s.Produce += time.Since(t0)
	}
	return nil
}

// restoreProcess runs the worker (in this process) over the whole input
// and removes its state directory: only the changelog stays.
func restoreProcess(ctx context.Context, o RestoreOptions, brokers []string, stateDir string, s *RestoreSize) error {
	defer os.RemoveAll(stateDir)
	cfg, err := config.Parse(fmt.Appendf(nil, restoreConfig, brokers[0], "restore-1", "", stateDir, "", "off"), nil)
	if err != nil {
		return fmt.Errorf("bench restore: the worker's configuration: %w", err)
	}
	a, err := wiring.New(cfg, wiring.Options{Logger: o.Logger, Role: wiring.RoleProcessor})
	if err != nil {
		return err
	}
	defer a.Close()
	var ph Phase
	err = runUntilCaughtUp(ctx, "setup worker", brokers, restoreName, inputTopic, &ph, a.Run)
	s.Process = ph.Elapsed
	return err
}
