package testtool

import (
	"strings"
	"testing"
)

// fakeTB records what Require does instead of stopping the real test.
type fakeTB struct {
	testing.TB
	skipped, failed string
}

func (f *fakeTB) Helper()                        {}
func (f *fakeTB) Skip(args ...any)               { f.skipped = args[0].(string) }
func (f *fakeTB) Fatalf(format string, a ...any) { f.failed = format }

func TestRequireMissingTool(t *testing.T) {
	const tool = "projector-no-such-tool"
	t.Setenv("CI", "")
	f := &fakeTB{}
	Require(f, tool, "nopkg")
	if f.failed != "" || !strings.Contains(f.skipped, tool) || !strings.Contains(f.skipped, "apt-get install -y nopkg") {
		t.Fatalf("locally: skipped %q, failed %q; want a skip naming the tool and package", f.skipped, f.failed)
	}
	t.Setenv("CI", "true")
	f = &fakeTB{}
	Require(f, tool, "nopkg")
	if f.failed == "" || f.skipped != "" {
		t.Fatalf("under CI=true: skipped %q, failed %q; want a failure", f.skipped, f.failed)
	}
}

func TestRequirePresentTool(t *testing.T) {
	if p := Require(t, "sh", "dash"); p == "" {
		t.Fatal("sh not found")
	}
}
