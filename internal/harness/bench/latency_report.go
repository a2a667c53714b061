package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/operator/humanize"
)

// Print writes the levels as a table.
func (r *LatencyResult) Print(w io.Writer) {
	o := r.Options
	loads := make([]string, len(o.Loads))
	for i, l := range o.Loads {
		loads[i] = strconv.Itoa(l) + "%"
	}
	fmt.Fprintf(w, "projector bench latency: %s of the maximum rate, %s per level (the first %s dropped), %d run(s); %d partitions, up to %d records per transaction;\n",
		strings.Join(loads, ", "), o.Duration, o.Warmup, o.Runs, o.Partitions, o.Batch)
	fmt.Fprintf(w, "workload mix: %s duplicates, %s reordered, %s late gaps, %s stale, %s conflicts, %s invalid; seed %d; embedded broker (kfake, log on disk) in this process\n",
		pct(o.Duplicates), pct(o.Reorder), pct(o.LateGaps), pct(o.Stale), pct(o.Conflicts), pct(o.Invalid), o.Seed)
	if r.Max != nil {
		fmt.Fprintf(w, "maximum rate: %s input records/s, measured: the pipeline on %s pre-produced records (%s events over %s aggregates) in %s\n\n",
			humanize.Thousands(int64(r.MaxRate)), humanize.Thousands(r.Max.Records), humanize.Thousands(int64(o.Events)), humanize.Thousands(int64(o.Aggregates)), r.Max.Elapsed.Round(time.Millisecond))
	} else {
		fmt.Fprintf(w, "maximum rate: %s input records/s, given (--rate)\n\n", humanize.Thousands(int64(r.MaxRate)))
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tload\toffered/s\tsent/s\tachieved/s\tkept up\tmatched\tstamp p50\tstamp p99\tstamp max\tread p50\tread p99\tread max\theld\theld p99\ttxns\ttxn every\tp50 txn\tcores\t")
	for _, l := range r.Levels {
		matched := fmt.Sprintf("%s/%s", humanize.Thousands(int64(l.Matched)), humanize.Thousands(int64(l.Expected)))
		fmt.Fprintf(tw, "%d\t%d%%\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%.2f\t\n", l.Run, l.Load,
			humanize.Thousands(int64(l.Offered)), humanize.Thousands(int64(l.Sent)), humanize.Thousands(int64(l.Achieved)), l.KeptUp(), matched,
			ms(l.Stamp.P50), ms(l.Stamp.P99), ms(l.Stamp.Max), ms(l.Read.P50), ms(l.Read.P99), ms(l.Read.Max), l.Held.N, ms(l.Held.P99), l.Txns, ms(l.TxnEvery()), ms(l.TxnP50), l.Cores())
	}
	tw.Flush()
	fmt.Fprintln(w, "\n(stamp: projection record timestamp − input record timestamp, Kafka's 1 ms resolution; read: when the read_committed reader got the")
	fmt.Fprintln(w, "projection record − when the input was produced, what a reader sees after the commit; both over the events applied on arrival;")
	fmt.Fprintln(w, "held: events produced before an earlier version of their aggregate (the workload's reorders and late gaps), held p99 their read")
	fmt.Fprintln(w, "latency, which includes the wait for the input; matched: applied events produced after the warm-up whose projection record was")
	fmt.Fprintln(w, "read, of all; sent: the producer's rate; achieved: input records over first produce to last output read; kept up: no when")
	fmt.Fprintln(w, "sent or achieved is more than 5% below offered; txns: the processor's committed transactions, txn every: the level's time")
	fmt.Fprintln(w, "over them; p50 txn: Begin until the Pebble write landed, which overlaps the next transaction; cores: this process's CPU time")
	fmt.Fprintln(w, "over the level's wall time, the broker's included)")
	r.printRequests(w)
}

// printRequests writes the processor's request round trips per level.
func (r *LatencyResult) printRequests(w io.Writer) {
	fmt.Fprintln(w, "\nthe processor's Kafka requests during each level, round trip p50 / p99 (count); a Fetch waits at the broker for data:")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "run\tload\t")
	for _, k := range timedRequests {
		fmt.Fprintf(tw, "%s\t", kmsg.NameForKey(int16(k)))
	}
	fmt.Fprintln(tw)
	for _, l := range r.Levels {
		fmt.Fprintf(tw, "%d\t%d%%\t", l.Run, l.Load)
		for _, rq := range l.Requests {
			fmt.Fprintf(tw, "%s / %s (%d)\t", ms(rq.P50), ms(rq.P99), rq.N)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}
