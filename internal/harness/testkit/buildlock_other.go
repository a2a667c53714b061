//go:build !unix

package testkit

// lockBuilds does nothing where flock is not available: concurrent builds
// then duplicate work, which costs time but not correctness.
func lockBuilds() (unlock func(), err error) { return func() {}, nil }
