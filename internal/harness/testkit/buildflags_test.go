package testkit

import (
	"os/exec"
	"strings"
	"testing"
)

// TestRaceIsCheaper: the race build is chosen only where the plain one
// would compile many packages from outside this module and the race one
// fewer in all; an edit of our own packages keeps the plain build.
func TestRaceIsCheaper(t *testing.T) {
	for _, c := range []struct {
		name         string
		plain, raced stale
		want         bool
	}{
		{"fresh cache after go test -race", stale{37, 624}, stale{1, 0}, true},
		{"warm cache", stale{1, 0}, stale{1, 0}, false},
		{"an edit of our packages", stale{20, 0}, stale{1, 0}, false},
		{"both caches empty", stale{37, 624}, stale{37, 624}, false},
		{"a dependency upgraded", stale{37, 12}, stale{1, 0}, false},
		{"the race build missing more", stale{37, 200}, stale{37, 400}, false},
	} {
		if got := raceIsCheaper(c.plain, c.raced); got != c.want {
			t.Errorf("%s: plain %+v, race %+v: race cheaper %v, want %v", c.name, c.plain, c.raced, got, c.want)
		}
	}
}

// TestStalePackagesOnAnEmptyCache: with nothing in the build cache, every
// package a build compiles is stale (all but unsafe, which the compiler
// knows without compiling), counted as this module's own or other.
func TestStalePackagesOnAnEmptyCache(t *testing.T) {
	t.Setenv("GOCACHE", t.TempDir())
	const pkg = "github.com/projector-dev/projector/internal/core/jsonenc"
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
	if err != nil {
		t.Fatal(err)
	}
	var own, other int
	for line := range strings.Lines(string(out)) {
		switch {
		case strings.TrimSpace(line) == "unsafe":
		case strings.HasPrefix(line, "github.com/projector-dev/projector/"):
			own++
		default:
			other++
		}
	}
	got, err := stalePackages(t.Context(), ".", nil, []string{pkg})
	if err != nil {
		t.Fatal(err)
	}
	if got != (stale{own, other}) || own == 0 || other == 0 {
		t.Errorf("stale %+v on an empty cache, want every dependency: %d own, %d other", got, own, other)
	}
}
