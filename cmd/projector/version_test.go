package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/harness/testkit"
)

// TestVersionCommand runs the real binary, built in this git work tree: both
// spellings print the same three facts, and the revision is the one git
// reports when the toolchain could record it.
func TestVersionCommand(t *testing.T) {
	a := runBinary(t, 30*time.Second, "version")
	b := runBinary(t, 30*time.Second, "--version")
	if a.code != 0 || b.code != 0 {
		t.Fatalf("exit codes %d, %d; stderr %q %q", a.code, b.code, a.stderr, b.stderr)
	}
	if a.stdout != b.stdout {
		t.Fatalf("`version` and `--version` differ:\n%s\n---\n%s", a.stdout, b.stdout)
	}
	for _, want := range []string{"projector ", "\nrevision: ", "\ngo: go1."} {
		if !strings.Contains(a.stdout, want) {
			t.Errorf("version output lacks %q:\n%s", want, a.stdout)
		}
	}
	if !strings.HasPrefix(a.stdout, "projector (devel)\n") && !strings.HasPrefix(a.stdout, "projector v") {
		t.Errorf("module version missing: %q", a.stdout)
	}
	if r := runBinary(t, 30*time.Second, "version", "extra"); r.code != 2 {
		t.Errorf("`version extra`: exit %d, want 2", r.code)
	}
}

// TestVersionRevision builds the binary with VCS stamping forced on (the
// environment may set GOFLAGS=-buildvcs=false, as this machine does) and
// checks that the printed revision is git's HEAD.
func TestVersionRevision(t *testing.T) {
	// Parallel: its build of a second binary (a link, seconds of CPU)
	// overlaps with the tests that mostly wait on processes and brokers.
	t.Parallel()
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not in a git work tree (git rev-parse: %v): nothing to compare the revision with", err)
	}
	bin := filepath.Join(t.TempDir(), "projector")
	// -s -w: no symbol table or DWARF, about half the link's CPU; the
	// build info (module and VCS stamps) `--version` prints is kept.
	err = testkit.WithBuildLock(t.Context(), ".", []string{"."}, func(flags []string) error {
		args := append(append([]string{"build"}, flags...), "-buildvcs=true", "-ldflags=-s -w", "-o", bin, ".")
		build := exec.Command("go", args...)
		build.Env = append(os.Environ(), "GOFLAGS=")
		if out, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("go build -buildvcs=true: %v\n%s", err, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	meta, err := exec.Command("go", "version", "-m", bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(meta), "vcs.revision=") {
		// Seen in linked git work trees on some set-ups: the toolchain
		// stamps nothing. TestBuildVersion still covers the formatting.
		t.Skip("the Go toolchain recorded no vcs.revision for this checkout; nothing to compare")
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if rev := strings.TrimSpace(string(head)); !strings.Contains(string(out), "revision: "+rev) {
		t.Errorf("revision is not git's HEAD %s:\n%s", rev, out)
	}
}

// TestBuildVersion covers what the binary test cannot choose: build info
// without VCS data, a "(devel)" module, and no build info at all.
func TestBuildVersion(t *testing.T) {
	full := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}, {Key: "vcs.time", Value: "2026-01-02T03:04:05Z"},
	}}
	cases := []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want string
	}{
		{"tagged, dirty tree", full, true, "projector v1.2.3\nrevision: abc123 (modified)\ncommit time: 2026-01-02T03:04:05Z\ngo: go1.99.1\n"},
		{"devel without vcs", &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: "(devel)"}}, true, "projector (devel)\nrevision: unknown\ngo: go1.99.1\n"},
		{"empty main version", &debug.BuildInfo{GoVersion: "go1.99.1"}, true, "projector unknown\nrevision: unknown\ngo: go1.99.1\n"},
	}
	for _, c := range cases {
		if got := buildVersion(c.info, c.ok); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
	if got := buildVersion(nil, false); !strings.HasPrefix(got, "projector unknown\nrevision: unknown\ngo: go1.") {
		t.Errorf("no build info: %q", got)
	}
}
