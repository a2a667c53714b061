package testkit

// WithBuildLock runs fn, which starts a go command that compiles this
// module's packages outside the test binary (BuildProjector, a build with
// other flags, `go list -export`), while holding a lock that every such
// command of every test process shares.
//
// Why: `go test ./...` runs several test binaries at once, and the go
// command does not share work between processes: two builds of the same
// package that start together both compile it (on an empty build cache,
// two concurrent `go build ./internal/core/state` cost 343 s of user CPU
// where one costs 157 s). Under the lock the first build compiles and the
// others find its packages in the cache. With a warm cache each build is
// a cache lookup and a link or copy, so the lock costs seconds at most.
func WithBuildLock(fn func() error) error {
	unlock, err := lockBuilds()
	if err != nil {
		return err
	}
	defer unlock()
	return fn()
}
