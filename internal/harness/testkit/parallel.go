package testkit

import (
	"flag"
	"runtime"
	"strconv"
)

// WaitingParallel lets n parallel tests (t.Parallel) run at once unless
// -parallel was given, for packages whose parallel tests wait on brokers'
// sessions, processes and webhooks far more than they compute: the default
// (GOMAXPROCS, 2 on CI) would leave the CPUs idle while they wait. Call it
// from TestMain after flag.Parse.
func WaitingParallel(n int) {
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if given || runtime.GOMAXPROCS(0) >= n {
		return
	}
	if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
		panic("testkit: " + err.Error())
	}
}
