package testkit

import (
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/projector-dev/projector/internal/harness/race"
)

// WithBuildLock runs fn, which starts a go command in dir that compiles
// pkgs of this module outside the test binary (BuildProjector, a build with
// other flags, `go list -export`), while holding a lock that every such
// command of every test process shares. fn gets the flags its command must
// pass (buildFlags): -race or none.
//
// Why the lock: `go test ./...` runs several test binaries at once, and the
// go command does not share work between processes: two builds of the same
// package that start together both compile it (on an empty build cache,
// two concurrent `go build ./internal/core/state` cost 343 s of user CPU
// where one costs 157 s). Under the lock the first build compiles and the
// others find its packages in the cache. With a warm cache each build is
// a cache lookup and a link or copy, so the lock costs seconds at most.
// The flags are chosen under it, so that they see what the build before
// left in the cache.
func WithBuildLock(ctx context.Context, dir string, pkgs []string, fn func(flags []string) error) error {
	unlock, err := lockBuilds()
	if err != nil {
		return err
	}
	defer unlock()
	flags, err := buildFlags(ctx, dir, pkgs)
	if err != nil {
		return err
	}
	return fn(flags)
}

// buildFlags returns the flags with which a go command run in dir should
// compile pkgs for a test: -race or none, whichever leaves fewer packages
// to compile.
//
// Why: the go command caches a package per flag set, and the race detector
// is one. On a fresh build cache, `go test -race` compiles every dependency
// with it, and a build of the projector binary without it compiled all 600
// of them again: 355 s for `go test -race -run XXX ./cmd/projector` where
// the race build of the binary after it took 12 s. But the binary built
// with the race detector runs slower, and so do the tests that run it
// (cmd/projector, deploy and the soak: 127 s of CPU against 85 s, warm), so
// a warm cache keeps the plain build: it chooses -race only where the plain
// build would compile at least minRaceSaving packages from outside this
// module (the standard library's and the dependencies': a fresh or cleared
// cache, not an edit of our own packages) and the race build would compile
// fewer. Outside a race-enabled test binary it is always the plain build.
func buildFlags(ctx context.Context, dir string, pkgs []string) ([]string, error) {
	if !race.Enabled {
		return nil, nil
	}
	plain, err := stalePackages(ctx, dir, nil, pkgs)
	if err != nil || !plain.cold() {
		return nil, err // the race build cannot be the cheaper: skip its go list
	}
	raced, err := stalePackages(ctx, dir, []string{"-race"}, pkgs)
	if err != nil || !raceIsCheaper(plain, raced) {
		return nil, err
	}
	return []string{"-race"}, nil
}

// stale counts the packages a build would compile: this module's own and
// the others (the standard library's, the dependencies').
type stale struct{ own, other int }

// cold: the build would compile at least minRaceSaving packages from
// outside this module.
func (s stale) cold() bool { return s.other >= minRaceSaving }

// raceIsCheaper: see buildFlags.
func raceIsCheaper(plain, raced stale) bool {
	return plain.cold() && raced.own+raced.other < plain.own+plain.other
}

// minRaceSaving: see buildFlags. An edit of this module leaves only its own
// packages stale, which it does not count, and a dependency's upgrade a
// few others; on a fresh cache the projector binary misses about 620.
const minRaceSaving = 100

// stalePackages counts the packages a build of pkgs with flags would
// compile.
func stalePackages(ctx context.Context, dir string, flags, pkgs []string) (stale, error) {
	args := append([]string{"list"}, flags...)
	args = append(args, "-deps", "-f", "{{if .Stale}}{{with .Module}}{{if .Main}}own{{else}}other{{end}}{{else}}other{{end}}{{end}}")
	cmd := exec.CommandContext(ctx, "go", append(args, pkgs...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return stale{}, fmt.Errorf("testkit: go %s: %w", strings.Join(args, " "), err)
	}
	var n stale
	for line := range strings.Lines(string(out)) {
		switch strings.TrimSpace(line) {
		case "own":
			n.own++
		case "other":
			n.other++
		}
	}
	return n, nil
}
