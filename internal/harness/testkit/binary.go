package testkit

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
)

// BuildProjector puts the projector binary (./cmd/projector of this module)
// at dir/projector and returns its path. The tests that run the real binary
// (cmd/projector, deploy, the soak) each need one, and linking it costs
// seconds of CPU: it goes through `go run -exec cp`, because the go command
// keeps the executables of go run in its build cache (Go 1.24 and later), so
// a second package's build of an unchanged tree is a copy out of the cache
// rather than another link. go run links without DWARF (the binary's
// behaviour, symbols and stack traces are the same). The build runs under
// WithBuildLock, so that test binaries starting together compile the
// packages once, with the flags it chooses: on a fresh cache, a test binary
// built with the race detector gets a projector binary built with it.
func BuildProjector(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("testkit: go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(dir, "projector")
	// go run executes `cp <the linked binary> bin`.
	err = WithBuildLock(ctx, root, []string{"./cmd/projector"}, func(flags []string) error {
		args := append(append([]string{"run"}, flags...), "-exec", "cp", "./cmd/projector", bin)
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("testkit: build projector: %v\n%s", err, b)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return bin, nil
}
