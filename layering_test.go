// Package projector_test holds the repository-wide checks: TestLayering.
package projector_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/projector-dev/projector/"

// layers are the import layers of the repository, bottom up
// (docs/design.md#file-map): a package may import packages of its own
// layer or of those below, never of one above. A path belongs to the first
// layer with a prefix it starts with (a prefix ending in "/" is a folder,
// any other is a package and its subpackages).
var layers = []struct {
	name     string
	prefixes []string
}{
	{"the core (internal/core)", []string{"internal/core/"}},
	{"the public library", []string{"dedup", "projection", "sideeffects", "processor"}},
	{"the application (internal/app)", []string{"internal/app/"}},
	{"the operator features (internal/operator)", []string{"internal/operator/"}},
	{"the harness (internal/harness)", []string{"internal/harness/"}},
	{"the commands and examples", []string{"cmd/", "configs", "deploy", "examples/"}},
}

// pending are the upward imports being removed (issue 24): an entry here
// that no longer exists fails the test, so that the list only shrinks.
var pending = []string{}

func layerOf(path string) int {
	for i, l := range layers {
		for _, p := range l.prefixes {
			if path == strings.TrimSuffix(p, "/") || strings.HasPrefix(path, strings.TrimSuffix(p, "/")+"/") {
				return i
			}
		}
	}
	return -1
}

// TestLayering fails on any non-test import against the direction of the
// layers, naming the edge. Tests may import what they need (the harness
// above all), so only the packages' own imports are held to it.
func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...").Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("go list: %v\n%s", err, stderr)
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		from := strings.TrimPrefix(fields[0], module)
		if from == strings.TrimSuffix(module, "/") {
			continue // this test's own package
		}
		lf := layerOf(from)
		if lf < 0 {
			t.Errorf("package %s is in no layer: add its folder to layers (and to docs/design.md#file-map)", from)
			continue
		}
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			to := strings.TrimPrefix(imp, module)
			lt := layerOf(to)
			if lt <= lf {
				continue
			}
			edge := from + " -> " + to
			seen[edge] = true
			if slices.Contains(pending, edge) {
				continue
			}
			t.Errorf("%s imports %s: %s is below %s, and imports go downwards only (docs/design.md#file-map)",
				from, to, layers[lf].name, layers[lt].name)
		}
	}
	for _, e := range pending {
		if !seen[e] {
			t.Errorf("pending upward import %q is gone: remove it from pending", e)
		}
	}
}
