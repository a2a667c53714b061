package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCPUProfileEnv: PROJECTOR_CPUPROFILE makes any command write a CPU
// profile; one that cannot be written is reported and the command still
// runs and succeeds.
func TestCPUProfileEnv(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cpu.prof")
	t.Setenv(profileEnv, path)
	var stdout, stderr bytes.Buffer
	if code := mainErr([]string{"version"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("no profile at %s: %v", path, err)
	}

	t.Setenv(profileEnv, filepath.Join(t.TempDir(), "missing", "cpu.prof"))
	stdout.Reset()
	stderr.Reset()
	if code := mainErr([]string{"version"}, &stdout, &stderr); code != exitOK || stdout.Len() == 0 {
		t.Fatalf("exit %d, stdout %q: the command must run without its profile", code, stdout.String())
	}
	if !strings.Contains(stderr.String(), profileEnv+": no CPU profile") {
		t.Fatalf("stderr %q does not report the missing profile", stderr.String())
	}
}
