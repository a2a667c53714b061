package bench

// `projector bench latency`: end-to-end latency at fractions of the
// pipeline's maximum rate (issue 26). A run goes:
//
//  1. the maximum rate: given (LatencyOptions.Rate), or measured as the
//     bench's pipeline phase measures it (setup, then pipeline: input
//     records per second on pre-produced input, outcome counts checked);
//  2. per run and load level: a workload sized for Duration at the level's
//     rate is generated (not timed); a fresh processor (group, state
//     directory, input and output topics of its own, built by newProcessor
//     as the bench builds it) is started and waited for until ready; a
//     read_committed reader of its projection topic starts; then pace
//     produces the records at the level's rate in small bursts, each
//     record's Timestamp set as it is produced; the level ends when the
//     reader has read an output for every applied event (or Drain passed);
//  3. each applied event produced after Warmup is matched with its
//     projection record (by lastEventId; a tombstone by its aggregate,
//     which the workload deletes once at most): the timestamp latency is
//     the projection record's Timestamp minus the input record's (both as
//     Kafka carries them: milliseconds), the read latency the reader's
//     receive time minus the input's produce time (what a reader sees once
//     the transaction committed). Events that arrived before an earlier
//     version of their aggregate (held: the workload's reorders and late
//     gaps) are reported apart: their latency is the input's wait.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/processor"
)

// LatencyOptions configure `projector bench latency`. The embedded Options
// give the workload's mix and seed, Partitions, Batch (the processor's
// MaxRecordsPerTxn), Runs (repetitions of every level), Dir, Logger and
// Progress; Events and Aggregates size the maximum-rate measurement and
// set the aggregates per event of the paced workloads. Brokers and the
// floor's options are not used: the broker is embedded.
type LatencyOptions struct {
	Options
	// Rate is the maximum rate in input records/s; 0: measure it first.
	Rate float64
	// Loads are the levels measured, in percent of Rate, in order.
	Loads []int
	// Duration is how long each level produces, Warmup included.
	Duration time.Duration
	// Warmup is dropped from the start of each level.
	Warmup time.Duration
	// Drain bounds the wait, after the last record was produced, for the
	// outputs of every applied event (default: a minute).
	Drain time.Duration
}

// DefaultLatencyOptions are the figures of docs/performance.md#latency.
func DefaultLatencyOptions() LatencyOptions {
	return LatencyOptions{Options: Defaults(), Loads: []int{10, 50, 90},
		Duration: 20 * time.Second, Warmup: 2 * time.Second, Drain: time.Minute}
}

// Validate reports options that cannot run.
func (o LatencyOptions) Validate() error {
	var errs []error
	if err := o.Options.Validate(); err != nil {
		errs = append(errs, err)
	}
	if o.Rate < 0 {
		errs = append(errs, fmt.Errorf("--rate %g is negative", o.Rate))
	}
	if len(o.Loads) == 0 {
		errs = append(errs, errors.New("--loads needs at least one level"))
	}
	for _, l := range o.Loads {
		if l <= 0 || l > 1000 {
			errs = append(errs, fmt.Errorf("--loads: %d is not a percentage between 1 and 1000", l))
		}
	}
	if o.Duration <= 0 || o.Warmup < 0 || o.Warmup >= o.Duration {
		errs = append(errs, fmt.Errorf("--warmup %s must be shorter than --duration %s, both positive", o.Warmup, o.Duration))
	}
	if o.Drain < 0 {
		errs = append(errs, fmt.Errorf("--drain %s is negative", o.Drain))
	}
	return errors.Join(errs...)
}

// LatencyStats summarise latencies.
type LatencyStats struct {
	N                  int
	Min, P50, P99, Max time.Duration
}

func latencyStats(d []time.Duration) LatencyStats {
	if len(d) == 0 {
		return LatencyStats{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(p float64) time.Duration { return s[int(p*float64(len(s)-1))] }
	return LatencyStats{N: len(s), Min: s[0], P50: at(0.50), P99: at(0.99), Max: s[len(s)-1]}
}

// LatencyLevel is one run at one load level.
type LatencyLevel struct {
	Run, Load int
	// Offered is the rate asked of the producer, Sent the rate it reached
	// (input records/s over the production), Achieved the pipeline's:
	// input records over the time from the first produce to the last
	// output read.
	Offered, Sent, Achieved float64
	Records                 int // input records produced
	// Expected are the applied events produced after the warm-up; Matched
	// those whose projection record was read.
	Expected, Matched int
	// Stamp is projection record Timestamp − input record Timestamp (1 ms
	// resolution: Kafka's); Read is the read_committed reader's receive
	// time − the input's produce time: both of the events applied on
	// arrival. Held is the read latency of the events that arrived before
	// an earlier version of their aggregate (the workload's reorders and
	// late gaps): theirs includes the wait for the input.
	Stamp, Read, Held LatencyStats
	// Txns are the processor's committed transactions during the level and
	// TxnP50/TxnP99 their durations: Begin until the Pebble write landed,
	// which, with the processor's AsyncCommit, overlaps the next
	// transaction (so they can exceed the time between two).
	Txns           int
	TxnP50, TxnP99 time.Duration
	// Requests are the round trips of the processor's clients' Kafka
	// requests of the transaction cycle during the level (timedRequests).
	Requests []RequestStats
	// Elapsed is first produce to last output read; CPU the process's CPU
	// time over it (broker, producer, processor and reader together).
	Elapsed, CPU time.Duration
}

// KeptUp says whether the level ran at the offered rate: "yes", or which
// side fell more than 5% short.
func (l LatencyLevel) KeptUp() string {
	switch {
	case l.Sent < 0.95*l.Offered:
		return "no: producer"
	case l.Achieved < 0.95*l.Offered:
		return "no: pipeline"
	}
	return "yes"
}

// TxnEvery is the mean time from one committed transaction to the next.
func (l LatencyLevel) TxnEvery() time.Duration {
	if l.Txns == 0 {
		return 0
	}
	return l.Elapsed / time.Duration(l.Txns)
}

// Cores is CPU time over wall time.
func (l LatencyLevel) Cores() float64 {
	if l.Elapsed <= 0 {
		return 0
	}
	return l.CPU.Seconds() / l.Elapsed.Seconds()
}

// LatencyResult is a whole latency benchmark.
type LatencyResult struct {
	Options LatencyOptions
	// MaxRate is the 100% rate (input records/s); Max the phase that
	// measured it (nil when given).
	MaxRate float64
	Max     *Phase
	Levels  []LatencyLevel
}

// Latency runs the latency benchmark on an embedded broker.
func Latency(ctx context.Context, o LatencyOptions) (*LatencyResult, error) {
	o.applyDefaults()
	if o.Drain <= 0 {
		o.Drain = time.Minute
	}
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("bench latency: %w", err)
	}
	dir, b, stop, err := workBroker(o.Dir, "projector-bench-latency-", o.Partitions)
	if err != nil {
		return nil, err
	}
	defer stop()
	brokers := []string{b.Addr()}
	res := &LatencyResult{Options: o, MaxRate: o.Rate}
	if o.Rate == 0 {
		ph, err := measureMax(ctx, o.Options, brokers, dir)
		if err != nil {
			return nil, err
		}
		res.Max, res.MaxRate = &ph, ph.Rate()
		fmt.Fprintf(o.Progress, "max rate: %.0f input records/s (%d records in %s)\n", ph.Rate(), ph.Records, ph.Elapsed.Round(time.Millisecond))
	}
	for run := 1; run <= o.Runs; run++ {
		for _, load := range o.Loads {
			lv, err := latencyLevel(ctx, o, brokers, dir, run, load, res.MaxRate)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(o.Progress, "run %d, %d%%: offered %.0f/s, achieved %.0f/s, read p50 %s p99 %s, %d/%d matched\n",
				run, load, lv.Offered, lv.Achieved, ms(lv.Read.P50), ms(lv.Read.P99), lv.Matched, lv.Expected)
			res.Levels = append(res.Levels, lv)
		}
	}
	return res, nil
}

// measureMax is the bench's pipeline phase: the workload produced first,
// then the processor timed until its group caught up; wrong outcome counts
// are an error (a fast wrong run is no maximum).
func measureMax(ctx context.Context, o Options, brokers []string, dir string) (Phase, error) {
	const name = "lat-max"
	input := name + ".input"
	if err := testkit.CreateTopic(ctx, brokers, input, int32(o.Partitions)); err != nil {
		return Phase{}, fmt.Errorf("bench: create %s: %w", input, err)
	}
	r := &Result{Want: map[string]int64{}}
	if err := setup(ctx, o, brokers, input, r); err != nil {
		return Phase{}, err
	}
	runtime.GC()
	fmt.Fprintf(o.Progress, "max rate: pipeline on %d pre-produced records ...\n", r.Input)
	ph, got, err := pipeline(ctx, o, brokers, input, name, filepath.Join(dir, "state-max"), r.Input)
	if err != nil {
		return ph, err
	}
	for _, oc := range Outcomes {
		if got[oc] != r.Want[oc] {
			return ph, fmt.Errorf("bench latency: max-rate run: outcome %s: got %d, want %d (reference fold)", oc, got[oc], r.Want[oc])
		}
	}
	return ph, nil
}

// pacedWorkload generates the records of one level: enough events that,
// with the mix's extra records, about rate × Duration records result, in
// chunks of disjoint aggregates; applied is the reference fold's count of
// applied events (each has one projection record).
func pacedWorkload(o LatencyOptions, rate float64, seed uint64) (recs []workload.Record, applied int) {
	extra := 1 + o.Duplicates + o.Stale + o.Conflicts + o.Invalid
	events := max(1, int(rate*o.Duration.Seconds()/extra))
	perAgg := float64(o.Aggregates) / float64(o.Events)
	chunks := (events + o.Chunk - 1) / o.Chunk
	for c := range chunks {
		ev := events / chunks
		if c == chunks-1 {
			ev = events - ev*(chunks-1)
		}
		part, exp := workload.Generate(o.workload(seed+uint64(c), ev, int(float64(ev)*perAgg)))
		if c > 0 {
			renameChunk(part, c)
		}
		recs = append(recs, part...)
		applied += exp.Applied
	}
	return recs, applied
}

// latencyLevel measures one load level with a fresh processor.
func latencyLevel(ctx context.Context, o LatencyOptions, brokers []string, dir string, run, load int, maxRate float64) (LatencyLevel, error) {
	lv := LatencyLevel{Run: run, Load: load, Offered: maxRate * float64(load) / 100}
	name := "lat-r" + strconv.Itoa(run) + "-l" + strconv.Itoa(load)
	fmt.Fprintf(o.Progress, "run %d, %d%%: generating %.0f records ...\n", run, load, lv.Offered*o.Duration.Seconds())
	recs, applied := pacedWorkload(o, lv.Offered, o.Seed+uint64(1000*run+load))
	lv.Records = len(recs)
	input := name + ".input"
	if err := testkit.CreateTopic(ctx, brokers, input, int32(o.Partitions)); err != nil {
		return lv, fmt.Errorf("bench: create %s: %w", input, err)
	}
	w, err := startWorker(ctx, o.Options, brokers, input, name, filepath.Join(dir, "state-"+name))
	if err != nil {
		return lv, err
	}
	defer w.close()
	rd, err := startReader(brokers, projectionTopic(name))
	if err != nil {
		return lv, err
	}
	defer rd.close()
	cpu0 := processCPU()
	txn0 := w.txnCount()
	w.req.start()
	sent, prodTime, err := pace(ctx, brokers, input, recs, lv.Offered)
	if err != nil {
		return lv, err
	}
	lv.Sent = float64(len(recs)) / prodTime.Seconds()
	// Every applied event has one projection record: wait for all.
	werr := testkit.WaitFor(ctx, prodTime/10+o.Drain, func() bool { return rd.count() >= int64(applied) || w.stopped() })
	lv.CPU = processCPU() - cpu0
	lv.Txns, lv.TxnP50, lv.TxnP99 = w.txnsSince(txn0)
	lv.Requests = w.req.stats()
	if err := w.close(); err != nil {
		return lv, err
	}
	outs := rd.close()
	if werr != nil {
		return lv, fmt.Errorf("bench latency: %s: %d of %d outputs read after the drain wait: %w", name, len(outs), applied, werr)
	}
	start := time.Unix(0, sent[0])
	if err := lv.measure(recs, sent, outs, start.Add(o.Warmup).UnixNano()); err != nil {
		return lv, err
	}
	if len(outs) > 0 {
		last := slices.MaxFunc(outs, func(a, b output) int { return cmp.Compare(a.recv, b.recv) }).recv
		lv.Elapsed = time.Unix(0, last).Sub(start)
		lv.Achieved = float64(len(recs)) / lv.Elapsed.Seconds()
	}
	return lv, nil
}

// worker is a processor running in a goroutine, and its committed
// transactions' durations.
type worker struct {
	st   *processor.Store
	dir  string
	stop context.CancelFunc
	done chan error
	once sync.Once
	err  error

	req *requestTimer

	mu  sync.Mutex
	lat []time.Duration
}

// startWorker starts the processor on input and waits until it is ready
// (joined, assigned, restored), so that the level's first records do not
// wait for the group.
func startWorker(ctx context.Context, o Options, brokers []string, input, name, stateDir string) (*worker, error) {
	st, err := processor.OpenStore(stateDir, 0)
	if err != nil {
		return nil, err
	}
	w := &worker{st: st, dir: stateDir, done: make(chan error, 1), req: &requestTimer{}}
	p, err := newProcessor(o, brokers, input, name, st, w.req)
	if err != nil {
		return nil, errors.Join(err, st.Close(), os.RemoveAll(stateDir))
	}
	p.Stats().Observe(func(t processor.TxnObservation) {
		if t.Result == "committed" {
			w.mu.Lock()
			w.lat = append(w.lat, t.Duration)
			w.mu.Unlock()
		}
	})
	runCtx, stop := context.WithCancel(ctx)
	w.stop = stop
	go func() { w.done <- p.Run(runCtx) }()
	readyCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := p.WaitReady(readyCtx); err != nil {
		return nil, errors.Join(fmt.Errorf("bench latency: processor not ready: %w", err), w.close())
	}
	return w, nil
}

// stopped reports whether Run returned (before close: an error).
func (w *worker) stopped() bool { return len(w.done) > 0 }

func (w *worker) txnCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.lat)
}

// txnsSince are the committed transactions after the first n: how many,
// and their p50 and p99 durations.
func (w *worker) txnsSince(n int) (int, time.Duration, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	l := w.lat[n:]
	return len(l), percentile(l, 0.50), percentile(l, 0.99)
}

// close stops the processor, waits for Run and closes the store; it
// returns Run's error. Later calls return the same.
func (w *worker) close() error {
	w.once.Do(func() {
		w.stop()
		w.err = <-w.done
		if w.err != nil {
			w.err = fmt.Errorf("bench latency: processor: %w", w.err)
		}
		w.err = errors.Join(w.err, w.st.Close(), os.RemoveAll(w.dir))
	})
	return w.err
}
