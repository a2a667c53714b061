//go:build !race

// Package race tells tests whether the race detector is on: it slows the
// integration workloads by an order of magnitude (they run smaller under
// it), and it makes sync.Pool drop items at random (allocation counts mean
// nothing under it).
package race

// Enabled is true in a binary built with the race detector.
const Enabled = false
