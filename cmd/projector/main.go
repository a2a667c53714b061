// Command projector turns an at-least-once event stream into exactly one
// correct business effect: see README.md and `projector --help`.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/projector-dev/projector/internal/app/config"
)

// Exit codes (docs/contract.md#exit-codes-and-signals).
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

// usageError marks errors that exit with code 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"demo", "run everything once on an embedded broker with sample data and print a summary", runDemo},
		{"run", "run the live worker: projector run --config FILE", runRun},
		{"rebuild", "replay the input into a new projection topic, side effects suppressed", runRebuild},
		{"diff", "compare two projection topics key by key", runDiff},
		{"effects", "the side-effect ledger: effects list|show|resolve --config FILE", runEffects},
		{"gaps", "held aggregates: gaps list|skip --config FILE", runGaps},
		{"inspect", "one aggregate's guard version, state and held events", runInspect},
		{"broker", "run the persistent embedded broker (development, demos, soak) until SIGTERM", runBroker},
		{"bench", "measure the pipeline against the transport floor on an embedded broker (bench ingress: the HTTP front door)", runBench},
		{"version", "print the version, VCS revision and Go version of this binary (also --version)", runVersion},
	}
}

func main() {
	os.Exit(mainErr(os.Args[1:], os.Stdout, os.Stderr))
}

func mainErr(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	if args[0] == "--version" {
		args = append([]string{"version"}, args[1:]...)
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		defer cpuProfile(stderr)()
		err := c.run(ctx, args[1:], stdout, stderr)
		return report(err, stderr)
	}
	fmt.Fprintf(stderr, "projector: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

// report prints err and maps it to an exit code.
func report(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, pflag.ErrHelp) {
		return exitOK
	}
	var ue usageError
	var ce *config.Error
	if errors.As(err, &ue) || errors.As(err, &ce) {
		fmt.Fprintf(stderr, "projector: %v\n", err)
		return exitUsage
	}
	fmt.Fprintf(stderr, "projector: %v\n", err)
	return exitRuntime
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "projector: exactly-once projections and side effects from an at-least-once Kafka stream.")
	fmt.Fprintln(w, "\nUsage:\n  projector <command> [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "\nRun 'projector <command> --help' for the command's flags and an example.")
}
