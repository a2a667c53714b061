//go:build unix

package testkit

import (
	"path/filepath"
	"testing"
	"time"
)

// TestBuildLockExcludes: while one holder has the build lock, a second
// taker (another open of the lock file, as another test process makes)
// waits, and gets it once the first lets go. It locks a file of its own:
// the shared one is held by other test processes' builds for as long as a
// cold build takes, which would fail the waits below.
func TestBuildLockExcludes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "builds.lock")
	unlock, err := lockFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan func(), 1)
	go func() {
		u, err := lockFile(path)
		if err != nil {
			t.Error(err)
			u = func() {}
		}
		got <- u
	}()
	select {
	case u := <-got:
		u()
		unlock()
		t.Fatal("a second taker got the lock while the first held it")
	case <-time.After(300 * time.Millisecond): // sleep ok: the wait a second taker must not end
	}
	unlock()
	select {
	case u := <-got:
		u()
	case <-time.After(10 * time.Second):
		t.Fatal("the second taker did not get the lock after the first let go")
	}
}
