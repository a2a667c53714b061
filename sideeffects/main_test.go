package sideeffects_test

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"
)

// waitingParallel is how many parallel tests (t.Parallel) run at once here
// unless -parallel is given: the parallel tests of this package wait on
// group sessions, held transactions and webhooks hung to their timeouts far
// more than they compute (TestExecutorZombieCannotCommit's two cuts wait
// out a 6 s session each), so the default of GOMAXPROCS (2 on CI) would
// leave the CPUs idle while they wait. cmd/projector does the same.
const waitingParallel = 4

func TestMain(m *testing.M) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given && runtime.GOMAXPROCS(0) < waitingParallel {
		if err := flag.Set("test.parallel", strconv.Itoa(waitingParallel)); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
