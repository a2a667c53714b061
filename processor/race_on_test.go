//go:build race

package processor_test

// raceEnabled scales workloads down under the race detector, which slows this
// package ~20x; the full sizes run without it (see .ci/run).
const raceEnabled = true
