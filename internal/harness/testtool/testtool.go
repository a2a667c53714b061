// Package testtool finds the external programs that tests drive (kcat,
// promtool). It is separate from testkit because testkit is linked into the
// binary (the demo uses it) and this package imports "testing".
package testtool

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
)

// Require returns the path of an external program a test drives. Locally a
// missing tool skips the test, naming the Debian package that provides it;
// under CI (CI=true) it fails, because .ci/run installs the tool and a skip
// there would hide a check that never ran.
func Require(t testing.TB, name, debianPackage string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	msg := fmt.Sprintf("%s not found on PATH (install the Debian package %s: apt-get install -y %s)", name, debianPackage, debianPackage)
	if InCI() {
		t.Fatalf("%s; under CI=true this test must run, not skip", msg)
		return ""
	}
	t.Skip(msg + "; skipping (under CI=true this fails)")
	return ""
}

// InCI reports whether the tests run under CI (CI=true, as .ci/run's caller sets).
func InCI() bool { return os.Getenv("CI") == "true" }
