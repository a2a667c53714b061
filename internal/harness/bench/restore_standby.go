// `projector bench restore --standby`: how fast a standby replica takes a
// dead instance's partitions over at scale (issue 26,
// docs/decisions/017-standby-replicas.md).
//
// Per run, on the setup's broker (the setup is the one of restore.go, and
// reused from --dir the same way: the mode is not part of its identity):
//
//  1. worker A (instance "a", state.standbyReplicas 1, a short
//     kafka.sessionTimeout, an empty state.dir) starts alone and restores
//     the whole changelog: start until GET /readyz 200 is the usual restore
//     figure, and it must restore every committed changelog record.
//  2. worker B (instance "b", empty state.dir) starts. The group balances:
//     A keeps half the partitions, B restores the other half from scratch
//     and keeps a standby copy of A's half. Measured on B (GET /metrics):
//     start until ready with its half, and until its standby caught up:
//     every standby partition at its changelog's end, its restored and
//     standby records together at least the changelog's committed records
//     (each of B's and A's partitions read once from an empty store), and
//     projector_standby_records_total unchanged over a second. That is the
//     background cost a standby replica adds.
//  3. A is killed with SIGKILL: no leave, and idle (the setup consumed the
//     whole input), so no transaction is open (with one open, the takeover
//     waits for the broker's abort of it at the transaction timeout,
//     standby or not: decision 017). Measured on B, polled every 20 ms:
//     kill until it owns every partition (about the session timeout), then
//     until GET /readyz answers 200 with all of them (the issue's
//     acceptance: ≤ 5 s), and projector_restore_records_total's delta over
//     the takeover: what the standby did not spare.
//  4. B stops on SIGTERM and must exit 0.
//
// A run whose takeover restored more than 1% of the changelog, or whose
// workers did not end as they should (A by the SIGKILL, B with 0), is an
// error (RestoreResult.Mismatches).

package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/projector-dev/projector/internal/operator/humanize"
)

// DefaultStandbySession is the workers' kafka.sessionTimeout in standby
// mode: the embedded broker's least (group.min.session.timeout.ms), so the
// dead member's session expires soon.
const DefaultStandbySession = 6 * time.Second

// StandbyRun is one run of the standby mode.
type StandbyRun struct {
	// A: start until ready, restored records then, its VmHWM then.
	AReady    time.Duration
	ARestored int64
	ARSS      int64
	// AKilled: A ended by the SIGKILL (not on its own before it).
	AKilled bool
	// B: start until ready with its half (BRestored: its restore's
	// records); until its standby read its last record (StandbyDone: the
	// first poll that saw projector_standby_records_total at its final
	// value, StandbyRecords, with every standby partition caught up); and
	// until both (CatchUp, its VmHWM then: CaughtUpRSS).
	BReady, StandbyDone, CatchUp time.Duration
	BRestored                    int64
	StandbyRecords               int64
	StandbyPartitions            int
	CaughtUpRSS                  int64
	ToAssigned, ToReady          time.Duration // kill → B owns every partition → B ready
	TakeoverRestored             int64         // B's restored records over the takeover
	TakeoverRSS, BPeakRSS        int64         // B's VmHWM once ready with every partition; over its life
	BExit                        int
	ALog, BLog                   string
}

// problems lists what makes the run wrong (see the file comment).
func (r StandbyRun) problems(changelog int64) []string {
	var out []string
	if r.ARestored != changelog {
		out = append(out, fmt.Sprintf("worker A restored %d records, the changelog holds %d", r.ARestored, changelog))
	}
	if r.TakeoverRestored*100 > changelog {
		out = append(out, fmt.Sprintf("the takeover restored %d records (more than 1%% of the changelog's %d): the standby did not spare the restore (log: %s)", r.TakeoverRestored, changelog, r.BLog))
	}
	if !r.AKilled {
		out = append(out, fmt.Sprintf("worker A did not end by the SIGKILL (log: %s)", r.ALog))
	}
	if r.BExit != 0 {
		out = append(out, fmt.Sprintf("worker B exited %d on SIGTERM, want 0 (log: %s)", r.BExit, r.BLog))
	}
	return out
}

// standbyRun measures one run of the standby mode on the broker at
// brokerAddr, whose changelog holds changelog committed records.
func standbyRun(ctx context.Context, o RestoreOptions, brokerAddr, dir string, n int, changelog int64, run int) (StandbyRun, error) {
	var r StandbyRun
	spec := func(inst string) workerSpec {
		return workerSpec{broker: brokerAddr, dir: dir, name: fmt.Sprintf("sb%d%s", run, inst), instance: inst,
			kafkaExtra: fmt.Sprintf("  sessionTimeout: %s\n", o.SessionTimeout), stateExtra: ", standbyReplicas: 1",
			profile: fmt.Sprintf("%d-r%d%s", n, run, inst)}
	}
	fail := func(err error) (StandbyRun, error) {
		return r, fmt.Errorf("bench restore --standby: %d aggregates, run %d: %w", n, run, err)
	}
	a, err := startRestoreWorker(o, spec("a"))
	if err != nil {
		return fail(err)
	}
	defer a.close()
	r.ALog = a.log
	if r.AReady, err = waitReady(ctx, a.addr, a.exited, a.start); err != nil {
		return fail(fmt.Errorf("worker A: %w (log: %s)", err, a.log))
	}
	r.ARSS = vmHWM(a.cmd.Process.Pid)
	if r.ARestored, err = scrapeCounter(a.addr, "projector_restore_records_total"); err != nil {
		return fail(err)
	}
	fmt.Fprintf(o.Progress, "%d aggregates, standby run %d: A ready in %s (%d records restored, RSS %s); B starts ...\n",
		n, run, r.AReady.Round(time.Millisecond), r.ARestored, mib(r.ARSS))
	b, err := startRestoreWorker(o, spec("b"))
	if err != nil {
		return fail(err)
	}
	defer b.close()
	r.BLog = b.log
	if err := standbyCatchUp(ctx, o, b, changelog, &r); err != nil {
		return fail(fmt.Errorf("worker B: %w (log: %s)", err, b.log))
	}
	fmt.Fprintf(o.Progress, "%d aggregates, standby run %d: B ready with %d records restored in %s, its standby of %d partitions read its %d records in %s; B's RSS %s; killing A ...\n",
		n, run, r.BRestored, r.BReady.Round(time.Millisecond), r.StandbyPartitions, r.StandbyRecords, r.StandbyDone.Round(time.Millisecond), mib(r.CaughtUpRSS))
	if err := standbyTakeover(ctx, o, a, b, &r); err != nil {
		return fail(fmt.Errorf("%w (logs: %s, %s)", err, a.log, b.log))
	}
	r.BExit = b.stop()
	r.BPeakRSS = <-b.peak
	fmt.Fprintf(o.Progress, "%d aggregates, standby run %d: B owned every partition %s after the kill, ready %s after that, %d records restored in the takeover; exit %d\n",
		n, run, r.ToAssigned.Round(time.Millisecond), r.ToReady.Round(time.Millisecond), r.TakeoverRestored, r.BExit)
	return r, nil
}

// standbyCatchUp polls B's /metrics every 100 ms until its half is ready
// (r.BReady) and its standby caught up (r.CatchUp: the first of the polls
// a second apart that saw it so, with the same standby records).
func standbyCatchUp(ctx context.Context, o RestoreOptions, b *restoreWorker, changelog int64, r *StandbyRun) error {
	var since time.Time // the polls since then saw it caught up with r.StandbyRecords
	var standbyAt time.Time
	standbyRecs := int64(-1) // the standby caught up with these records since standbyAt
	return pollWorker(ctx, b, 100*time.Millisecond, func(m map[string]float64, now time.Time) (bool, error) {
		assigned, standby := int(m["projector_assigned_partitions"]), int(m["projector_standby_partitions"])
		ready := m["projector_ready"] == 1 && assigned > 0 && standby > 0 && assigned+standby == o.Partitions
		if ready && r.BReady == 0 {
			r.BReady = now.Sub(b.start)
		}
		restored, records := int64(m["projector_restore_records_total"]), int64(m["projector_standby_records_total"])
		standbyCaught := standby > 0 && int(m["projector_standby_caught_up_partitions"]) == standby
		if !standbyCaught {
			standbyAt = time.Time{}
		} else if standbyAt.IsZero() || records != standbyRecs {
			standbyAt, standbyRecs = now, records
		}
		caught := ready && standbyCaught && restored+records >= changelog
		switch {
		case !caught:
			since = time.Time{}
		case since.IsZero() || records != r.StandbyRecords:
			since, r.StandbyRecords = now, records
		case now.Sub(since) >= time.Second:
			r.CatchUp, r.BRestored, r.StandbyPartitions = since.Sub(b.start), restored, standby
			r.StandbyDone = standbyAt.Sub(b.start)
			r.CaughtUpRSS = vmHWM(b.cmd.Process.Pid)
			return true, nil
		}
		return false, nil
	})
}

// standbyTakeover kills A and polls B every 20 ms until it owns every
// partition and GET /readyz answers 200.
func standbyTakeover(ctx context.Context, o RestoreOptions, a, b *restoreWorker, r *StandbyRun) error {
	before, err := scrapeCounter(b.addr, "projector_restore_records_total")
	if err != nil {
		return err
	}
	select {
	case <-a.exited:
		return fmt.Errorf("worker A exited before the kill")
	default:
	}
	_ = a.cmd.Process.Kill()
	<-a.exited
	killed := time.Now()
	ws, ok := a.cmd.ProcessState.Sys().(syscall.WaitStatus)
	r.AKilled = ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
	// A 200 counts when the next poll's is one too: one answered in the
	// moment between B's taking the partitions and its publishing that
	// they are not restored yet (the loop lists them as assigned first,
	// docs/contract.md#health-and-readiness) would be followed by a 503.
	var assigned, ready time.Time
	err = pollWorker(ctx, b, 20*time.Millisecond, func(m map[string]float64, now time.Time) (bool, error) {
		if int(m["projector_assigned_partitions"]) != o.Partitions {
			assigned, ready = time.Time{}, time.Time{}
			return false, nil
		}
		if assigned.IsZero() {
			assigned = now
		}
		if ok, err := readyz(b.addr); !ok || err != nil {
			ready = time.Time{}
			return false, nil // a slow answer is polled again
		}
		if ready.IsZero() {
			ready = time.Now()
			return false, nil
		}
		r.ToAssigned, r.ToReady = assigned.Sub(killed), ready.Sub(assigned)
		r.TakeoverRSS = vmHWM(b.cmd.Process.Pid)
		after, err := scrapeCounter(b.addr, "projector_restore_records_total")
		r.TakeoverRestored = after - before
		return true, err
	})
	return err
}

// pollWorker scrapes w's /metrics every interval and calls done with them
// until it returns true or an error, w exits, or readyWithin passed.
func pollWorker(ctx context.Context, w *restoreWorker, interval time.Duration, done func(m map[string]float64, now time.Time) (bool, error)) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	start := time.Now()
	var last error
	for {
		m, err := scrapeMetrics(w.addr)
		if err == nil {
			ok, err := done(m, time.Now())
			if ok || err != nil {
				return err
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.exited:
			return fmt.Errorf("the worker exited (last scrape: %v)", last)
		case <-tick.C:
		}
		if time.Since(start) > readyWithin {
			return fmt.Errorf("not done %s after its start (last scrape: %v)", readyWithin, last)
		}
	}
}

// metricsClient bounds a scrape: a worker busy writing Pebble still
// answers well within it.
var metricsClient = &http.Client{Timeout: 5 * time.Second}

// readyz reports whether GET /readyz answers 200.
func readyz(addr string) (bool, error) {
	resp, err := metricsClient.Get("http://" + addr + "/readyz")
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, nil
}

// scrapeMetrics reads every unlabelled series of GET /metrics.
func scrapeMetrics(addr string) (map[string]float64, error) {
	resp, err := metricsClient.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			out[name] = f
		}
	}
	return out, sc.Err()
}

// printStandby writes the standby mode's runs (RestoreResult.Print).
func (r *RestoreResult) printStandby(w io.Writer) {
	fmt.Fprintf(w, "\nstandby mode: worker A restores alone, worker B joins (state.standbyReplicas 1, kafka.sessionTimeout %s), A is killed with SIGKILL, B takes every partition over\n", r.Options.SessionTimeout)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "aggregates\trun\tchangelog\tA ready\tA restored\tA RSS\tB ready\tB restored\tstandby done\tstandby recs\tB RSS then\tkill→assigned\tassigned→ready\ttakeover restored\tB RSS then\tB peak RSS\tB exit\t")
	for _, s := range r.Sizes {
		for i, run := range s.Standby {
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", humanize.Thousands(int64(s.Aggregates)), i+1,
				humanize.Thousands(s.Changelog), run.AReady.Round(time.Millisecond), humanize.Thousands(run.ARestored), mib(run.ARSS),
				run.BReady.Round(time.Millisecond), humanize.Thousands(run.BRestored), run.StandbyDone.Round(time.Millisecond),
				humanize.Thousands(run.StandbyRecords), mib(run.CaughtUpRSS), run.ToAssigned.Round(time.Millisecond),
				ms(run.ToReady), humanize.Thousands(run.TakeoverRestored), mib(run.TakeoverRSS), mib(run.BPeakRSS), run.BExit)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "(A ready: A's start until GET /readyz 200, alone, every partition restored; A RSS: its VmHWM then. B ready: B's start until ready with its half; B restored: its restore's records; standby done: B's start until the first poll (every 100 ms) that saw projector_standby_records_total at its final value (standby recs) with every standby partition caught up – final once B was ready, its restored and standby records together covered the changelog and the counter stayed the same for a second; B RSS then: its VmHWM at that confirmation. kill→assigned: A's SIGKILL until B's projector_assigned_partitions covers every partition (about the session timeout); assigned→ready: then until GET /readyz 200 (polled every 20 ms, metrics then /readyz: 0 is ready in the poll that saw the assignment; a 200 counts when the next poll's is one too); takeover restored: B's projector_restore_records_total delta over the takeover; B RSS then: its VmHWM once ready with every partition; B peak RSS: over its life, sampled every 10 ms until it exited on SIGTERM)")
	r.printVerdict(w, "every run: A restored exactly the changelog's committed records and ended by the SIGKILL, the takeover restored at most 1% of the changelog, B exited 0 on SIGTERM")
}
