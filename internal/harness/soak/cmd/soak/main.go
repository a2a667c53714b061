// Command soak runs projector's process-level soak (package soak): the real
// binary against a broker in another process, SIGKILLed at random moments
// under load (processor and side-effect executor both busy), restarted, and
// checked against the reference model. It prints the figure line, the
// restart → first-commit latency and the share of kills that landed while
// offsets were moving, and exits 1 when a checker found a problem.
//
//	go run ./internal/harness/soak/cmd/soak --events 1000000 --kills 100
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/projector-dev/projector/internal/harness/soak"
)

func main() {
	soak.BrokerChild()
	var o soak.Options
	flag.IntVar(&o.Events, "events", 20000, "unique valid events (the input also holds duplicates, conflicts, stale writers and invalid records)")
	flag.IntVar(&o.Aggregates, "aggregates", 0, "aggregates (default events/10)")
	flag.IntVar(&o.Kills, "kills", 5, "SIGKILLs of the worker")
	flag.IntVar(&o.BrokerRestarts, "broker-restarts", 1, "broker restarts under load (in addition to the kills)")
	flag.IntVar(&o.Rate, "rate", 0, "input records per second while killing (default: the input spread over the lives)")
	effects := flag.Bool("effects", true, "a side effect (webhook per CaseEscalated, to a receiver the soak runs) so that the executor is busy too")
	flag.DurationVar(&o.RestartBound, "restart-bound", 5*time.Second, "restart → first commit latency the report counts restarts against")
	flag.Uint64Var(&o.Seed, "seed", 1, "workload and schedule seed")
	flag.IntVar(&o.Partitions, "partitions", 4, "input partitions")
	flag.IntVar(&o.MaxRecordsPerTxn, "batch", 1000, "kafka.maxRecordsPerTransaction of the worker")
	flag.DurationVar(&o.KillMin, "kill-min", 300*time.Millisecond, "shortest life of a worker before its SIGKILL")
	flag.DurationVar(&o.KillMax, "kill-max", 3*time.Second, "longest life of a worker before its SIGKILL")
	flag.StringVar(&o.Binary, "binary", "", "projector binary (default: built from this module)")
	flag.StringVar(&o.Dir, "dir", "", "work directory (default: a temporary one, removed when the checks pass)")
	flag.Parse()
	o.NoEffects = !*effects
	o.Log = os.Stderr
	keep := o.Dir != ""
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	res, err := soak.Run(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v (work directory %s kept)\n", err, res.Dir)
		os.Exit(1)
	}
	fmt.Printf("%s\n", res.Figure)
	fmt.Printf("took %s; %d broker restarts; %d kills landed between a Kafka commit and the Pebble write (restored from the changelog); %d worker exits not caused by the soak\n",
		res.Took.Round(time.Second), res.BrokerRestarts, res.KillsBetweenCommitAndPebble, len(res.WorkerExits))
	for _, e := range res.WorkerExits {
		fmt.Printf("  %s\n", strings.TrimSpace(e))
	}
	fmt.Printf("restart → first commit: %s\n", res.RestartLatency)
	fmt.Printf("  samples: %s\n", res.RestartLatency.SamplesString())
	fmt.Printf("kills while offsets moving: %d/%d (%.0f%%); with input pending: %d/%d; input %d records/s while killing\n",
		res.KillsMoving, len(res.Kills), 100*res.KillsMovingShare(), res.KillsPending, len(res.Kills), res.Rate)
	if res.StoppedEarly != "" {
		fmt.Printf("kills stopped early: %s\n", res.StoppedEarly)
	}
	if !res.Figure.OK() || !res.Checked.OK() {
		fmt.Fprintf(os.Stderr, "soak: FAILED: %s (work directory %s kept)\n", res.Checked, res.Dir)
		os.Exit(1)
	}
	if !keep {
		os.RemoveAll(res.Dir)
	}
}
