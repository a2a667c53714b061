package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// worker is one life of `projector run`.
type worker struct {
	cmd     *exec.Cmd
	started time.Time // just before cmd.Start
	log     string    // path of its stderr
	f       *os.File
	exited  chan struct{}
	code    int
}

func startProc(ctx context.Context, bin, logPath string, args ...string) (*worker, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	started := time.Now()
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	w := &worker{cmd: cmd, started: started, log: logPath, f: f, exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			w.code = ee.ExitCode()
		} else if err != nil {
			w.code = -1
		}
		f.Close()
		close(w.exited)
	}()
	return w, nil
}

func (w *worker) hasExited() bool {
	select {
	case <-w.exited:
		return true
	default:
		return false
	}
}

// waitStarted waits until the worker logged that it consumes (or exited).
func (w *worker) waitStarted(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		b, _ := os.ReadFile(w.log)
		if bytes.Contains(b, []byte("processor started")) || w.hasExited() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("soak: worker did not start within %s: %s", within, w.tail())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill sends SIGKILL and waits for the process to be gone.
func (w *worker) kill() {
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.exited
}

// term sends SIGTERM and returns the exit code.
func (w *worker) term(within time.Duration) int {
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.exited:
		return w.code
	case <-time.After(within):
		w.kill()
		return -1
	}
}

func (w *worker) tail() string {
	b, _ := os.ReadFile(w.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(len(lines)-3, 0):], " | ")
}

func (w *worker) panicked() bool {
	b, _ := os.ReadFile(w.log)
	return bytes.Contains(b, []byte("panic:")) || bytes.Contains(b, []byte("DATA RACE"))
}

// restoredRecords sums the records restored from the changelog in this life.
func (w *worker) restoredRecords() int {
	f, err := os.Open(w.log)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if !bytes.Contains(sc.Bytes(), []byte("restored state from changelog")) {
			continue
		}
		var l struct {
			Records int `json:"records"`
		}
		if json.Unmarshal(sc.Bytes(), &l) == nil {
			n += l.Records
		}
	}
	return n
}
