//go:build unix

package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockBuilds takes an exclusive flock on a file in the temporary directory;
// the kernel releases it when the holder exits, so a killed test leaves no
// stale lock behind. The file is per user: another user's lock file, made
// with their umask, may not be ours to open.
func lockBuilds() (unlock func(), err error) {
	return lockFile(filepath.Join(os.TempDir(), fmt.Sprintf("projector-test-builds-%d.lock", os.Getuid())))
}

// lockFile takes an exclusive flock on the file at path, creating it.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, fmt.Errorf("testkit: build lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("testkit: build lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
