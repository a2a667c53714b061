package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/projector-dev/projector/internal/operator/humanize"
)

// Print writes the result as tables.
func (r *Result) Print(w io.Writer) {
	o := r.Options
	fmt.Fprintf(w, "projector bench: %s events over %s aggregates; %s duplicates, %s reordered, %s late gaps, %s stale, %s conflicts, %s invalid; seed %d\n",
		humanize.Thousands(int64(o.Events)), humanize.Thousands(int64(o.Aggregates)), pct(o.Duplicates), pct(o.Reorder), pct(o.LateGaps), pct(o.Stale), pct(o.Conflicts), pct(o.Invalid), o.Seed)
	where := "embedded broker (kfake, log on disk) in this process"
	if !r.Embedded {
		where = "external brokers " + strings.Join(o.Brokers, ",")
	}
	fmt.Fprintf(w, "input: %s records on %d partitions, up to %d records per transaction; %s\n", humanize.Thousands(r.Input), o.Partitions, o.Batch, where)
	fmt.Fprintf(w, "setup (not timed): generated in %s, produced in %s\n\n", r.Generate.Round(time.Millisecond), r.Produce.Round(time.Millisecond))

	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tphase\trecords\ttime\tevents/s\ttxns\taborted\tp50 txn\tp99 txn\twritten/rec\tcpu/rec\tcores\tratio\t")
	for i, run := range r.Runs {
		row := func(ph Phase, ratio string) {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%.2f\t%s\t%.2f\t%s\t\n", i+1, ph.Name, humanize.Thousands(ph.Records),
				ph.Elapsed.Round(time.Millisecond), humanize.Thousands(int64(ph.Rate())), ph.Txns, ph.Aborted,
				ms(ph.P50), ms(ph.P99), ph.WrittenPerRecord(), us(ph.PerRecord()), ph.Cores(), ratio)
		}
		row(run.Floor, "")
		if run.FloorN != nil {
			row(*run.FloorN, fmt.Sprintf("%.3f", run.FloorNRatio()))
		}
		row(run.Pipeline, fmt.Sprintf("%.3f", run.Ratio()))
	}
	tw.Flush()
	fmt.Fprintf(w, "\nratio pipeline/transport floor: %.3f (median of %d run(s))\n", r.MedianRatio(), len(r.Runs))
	if f := r.MedianFloorNRatio(); f > 0 {
		fmt.Fprintf(w, "ratio transport floor ×%d/transport floor: %.3f (median): the transport alone, writing %d records per input record\n",
			o.FloorRecords, f, o.FloorRecords)
	}
	broker := "the embedded broker's included"
	if !r.Embedded {
		broker = "the external broker's not included"
	}
	fmt.Fprintf(w, "(written/rec: records written per input record; cpu/rec: this process's CPU time per input record, %s; cores: CPU time over wall time)\n", broker)

	fmt.Fprintln(w, "\npipeline outcome counts (committed) against the reference fold:")
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "outcome\texpected\t")
	for i := range r.Runs {
		fmt.Fprintf(tw, "run %d\t", i+1)
	}
	fmt.Fprintln(tw, "\t")
	for _, oc := range Outcomes {
		fmt.Fprintf(tw, "%s\t%d\t", oc, r.Want[oc])
		bad := false
		for _, run := range r.Runs {
			fmt.Fprintf(tw, "%d\t", run.Got[oc])
			bad = bad || run.Got[oc] != r.Want[oc]
		}
		mark := "ok"
		if bad {
			mark = "MISMATCH"
		}
		fmt.Fprintf(tw, "%s\t\n", mark)
	}
	tw.Flush()

	scope := "whole process: embedded broker, copy loop and pipeline"
	if !r.Embedded {
		scope = "whole process: copy loop and pipeline; the broker is external"
	}
	if r.PeakReset {
		fmt.Fprintf(w, "\npeak RSS: %s during the measured runs (%s); %s during setup (generator and producer)\n", mib(r.PeakRSS), scope, mib(r.SetupRSS))
	} else {
		fmt.Fprintf(w, "\npeak RSS: %s (%s, setup and generator included: the peak could not be reset)\n", mib(r.PeakRSS), scope)
	}
	if r.CPUProfile != "" {
		fmt.Fprintf(w, "CPU profile of run 1's pipeline phase: %s (go tool pprof -top %s)\n", r.CPUProfile, r.CPUProfile)
	}
	if m := r.Mismatches(); len(m) > 0 {
		fmt.Fprintf(w, "\nFAILED: %d outcome counts differ from the reference fold; the figures above are not valid.\n", len(m))
	} else {
		fmt.Fprintln(w, "\noutcome counts: correct in every run")
	}
}

func pct(f float64) string {
	if f <= 0 {
		return "0%"
	}
	return strconv.FormatFloat(f*100, 'g', 4, 64) + "%"
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
}

func us(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Microsecond), 'f', 2, 64) + "µs"
}

func mib(b int64) string {
	if b <= 0 {
		return "unknown"
	}
	return strconv.FormatFloat(float64(b)/(1<<20), 'f', 0, 64) + " MiB"
}

// Print writes every run, then the medians per size.
func (r *RestoreResult) Print(w io.Writer) {
	o := r.Options
	fmt.Fprintf(w, "projector bench restore: a fresh worker (`projector run --role processor`, a child process, state.dir empty) restores the changelog of N aggregates on %d partitions and becomes ready; %d run(s) per size\n", o.Partitions, o.Runs)
	fmt.Fprintln(w, "setup (not timed): one event per aggregate, processed by the real worker in this process; broker: kfake (log on disk) in this process, over TCP")
	for _, s := range r.Sizes {
		fmt.Fprintf(w, "  %s aggregates: generated in %s, produced in %s, processed in %s; changelog: %s committed records; this process's RSS after the setup %s (peak %s)\n",
			humanize.Thousands(int64(s.Aggregates)), s.Generate.Round(time.Millisecond), s.Produce.Round(time.Millisecond),
			s.Process.Round(time.Millisecond), humanize.Thousands(s.Changelog), mib(s.BenchRSS), mib(s.SetupPeak))
	}
	if o.SetupOnly {
		fmt.Fprintf(w, "\nsetup only: no run measured; the setup is kept in %s for later invocations with the same options\n", o.Dir)
		return
	}
	if o.Standby {
		r.printStandby(w)
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "aggregates\trun\tchangelog\trestored\tto ready\trecords/s\tfloor\tfloor/s\t×floor\tRSS at ready\tpeak RSS\tstate dir\tof which sst\tbytes/agg\texit\t")
	for _, s := range r.Sizes {
		for i, run := range s.Runs {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t%s\t%s\t%s\t%.0f\t%d\t\n", humanize.Thousands(int64(s.Aggregates)), i+1,
				humanize.Thousands(s.Changelog), humanize.Thousands(run.Restored), run.Ready.Round(time.Millisecond),
				humanize.Thousands(int64(run.Rate())), run.Floor.Took.Round(time.Millisecond), humanize.Thousands(int64(run.Floor.Rate())), run.FloorRatio(), mib(run.ReadyRSS), mib(run.PeakRSS), mib(run.StateBytes), mib(max(run.SSTBytes, 1)), // no table yet is 0 MiB, not unknown
				float64(run.StateBytes)/float64(s.Aggregates), run.ExitCode)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "\nmedian per size:")
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "aggregates\tto ready\trecords/s\t×floor\tpeak RSS\tbytes/agg\t")
	for _, s := range r.Sizes {
		fmt.Fprintf(tw, "%s\t%.2fs\t%s\t%.2f\t%s\t%.0f\t\n", humanize.Thousands(int64(s.Aggregates)),
			s.Median(func(r RestoreRun) float64 { return r.Ready.Seconds() }),
			humanize.Thousands(int64(s.Median(RestoreRun.Rate))), s.Median(RestoreRun.FloorRatio),
			mib(int64(s.Median(func(r RestoreRun) float64 { return float64(r.PeakRSS) }))),
			s.Median(func(r RestoreRun) float64 { return float64(r.StateBytes) })/float64(s.Aggregates))
	}
	tw.Flush()
	fmt.Fprintln(w, "(to ready: process start until GET /readyz 200; records/s: restored changelog records over that time; floor: a plain kgo consumer in the bench's process reading the same committed changelog records from the same broker just before the run, ×floor: to ready / floor; RSS at ready: the worker's VmHWM once ready; peak RSS: its VmHWM over its life, sampled every 10 ms until it exited on SIGTERM; state dir: file sizes under state.dir after exit, of which sst: Pebble's tables (the processor's store has no WAL: the rest is Pebble's manifest and other metadata); bytes/agg: state dir / aggregates)")
	r.printVerdict(w, "every run restored exactly the changelog's committed records and exited 0 on SIGTERM")
}

// printVerdict ends a restore report: every mismatch, or ok when there is
// none.
func (r *RestoreResult) printVerdict(w io.Writer, ok string) {
	if m := r.Mismatches(); len(m) > 0 {
		fmt.Fprintf(w, "\nFAILED: %s\n", strings.Join(m, "; "))
	} else {
		fmt.Fprintln(w, "\n"+ok)
	}
}
