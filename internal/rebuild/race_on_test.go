//go:build race

package rebuild

// raceEnabled scales workloads down under the race detector, which slows
// these integration tests by an order of magnitude.
const raceEnabled = true
