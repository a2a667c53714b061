package main

import (
	"fmt"
	"io"
	"os"
	"runtime/pprof"
)

// profileEnv names a file that receives a CPU profile of the whole command
// (docs/contract.md#command-line): `projector bench restore --cpuprofile`
// sets it for the workers it starts, whose restore is what it measures.
const profileEnv = "PROJECTOR_CPUPROFILE"

// cpuProfile starts the CPU profile profileEnv asks for; stop ends it. A
// profile that cannot be started is reported and the command runs anyway:
// it is a measurement aid, not part of the work.
func cpuProfile(stderr io.Writer) (stop func()) {
	path := os.Getenv(profileEnv)
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err == nil {
		if err = pprof.StartCPUProfile(f); err != nil {
			f.Close()
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "projector: %s: no CPU profile: %v\n", profileEnv, err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
