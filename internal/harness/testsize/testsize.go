// Package testsize tells tests how large to make their integration
// workloads: the generated event streams, the soak's volume, the rebuild
// fixtures.
//
// By default they are small – a fifth of their full size, a tenth for the
// costliest – with or without the race detector, so that the README's test
// command, the first thing a newcomer runs, ends in minutes on a 2-core
// machine with an empty build cache. Every check still runs at that size:
// what shrinks is volume, not the crashes, faults and assertions (each test
// that counts its faults fails when one did not land). With
// PROJECTOR_TEST_SIZE=full they run at full size; .ci/run does so for the
// exactly-once tests, without the race detector (docs/decisions/021).
package testsize

import "os"

// Env is the environment variable that selects the size: "full", or
// anything else (unset) for small.
const Env = "PROJECTOR_TEST_SIZE"

// Small reports whether the integration workloads run at their small size:
// unless Env is "full".
func Small() bool { return os.Getenv(Env) != "full" }
