// The measured worker of `projector bench restore`: the projector binary in
// a child process, so that its memory is its own.

package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// readyWithin bounds a worker's restore: far above the goal (10M
// aggregates in 60 s), so that only a stuck worker hits it.
const readyWithin = 30 * time.Minute

// restoreRun starts a fresh worker (empty state.dir) and measures it until
// ready, then stops it with SIGTERM.
func restoreRun(ctx context.Context, o RestoreOptions, brokerAddr, dir string, n, run int) (RestoreRun, error) {
	var r RestoreRun
	name := fmt.Sprintf("r%d", run)
	stateDir := filepath.Join(dir, "state-"+name)
	if err := os.RemoveAll(stateDir); err != nil {
		return r, err
	}
	defer os.RemoveAll(stateDir)
	httpAddr, err := freeAddr()
	if err != nil {
		return r, err
	}
	cfgPath := filepath.Join(dir, "worker-"+name+".yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, restoreConfig, brokerAddr, stateDir, httpAddr), 0o644); err != nil {
		return r, err
	}
	r.Log = filepath.Join(dir, "worker-"+name+".log")
	logf, err := os.Create(r.Log)
	if err != nil {
		return r, err
	}
	defer logf.Close()
	cmd := exec.Command(o.Binary, "run", "--config", cfgPath, "--role", "processor", "--log-format", "json", "--log-level", "info")
	cmd.Stdout, cmd.Stderr = logf, logf
	if o.CPUProfile != "" {
		cmd.Env = append(os.Environ(), "PROJECTOR_CPUPROFILE="+fmt.Sprintf("%s.%d-r%d", o.CPUProfile, n, run))
	}
	exited := make(chan struct{})
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return r, fmt.Errorf("bench restore: start the worker: %w", err)
	}
	go func() { _ = cmd.Wait(); close(exited) }()
	peak := sampleHWM(cmd.Process.Pid, exited)
	defer func() {
		select {
		case <-exited:
		default: // an error before the SIGTERM below
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	if r.Ready, err = waitReady(ctx, httpAddr, exited, start); err != nil {
		return r, fmt.Errorf("bench restore: %d aggregates, run %d: %w (log: %s)", n, run, err, r.Log)
	}
	r.ReadyRSS = vmHWM(cmd.Process.Pid)
	if r.Restored, err = scrapeCounter(httpAddr, "projector_restore_records_total"); err != nil {
		return r, fmt.Errorf("bench restore: %d aggregates, run %d: %w", n, run, err)
	}
	r.ExitCode = stop(cmd, exited)
	r.PeakRSS = <-peak
	r.StateBytes, r.SSTBytes, err = dirBytes(stateDir)
	return r, err
}

// stop sends SIGTERM and returns the exit code (-1 when it had to be killed
// after a minute).
func stop(cmd *exec.Cmd, exited <-chan struct{}) int {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return cmd.ProcessState.ExitCode()
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-exited
		return -1
	}
}

// waitReady polls GET /readyz every 10 ms (the figure's resolution) until
// it answers 200, and returns the time since start.
func waitReady(ctx context.Context, addr string, exited <-chan struct{}, start time.Time) (time.Duration, error) {
	hc := &http.Client{Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	last := "no answer"
	for {
		resp, err := hc.Get("http://" + addr + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start), nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-exited:
			return 0, fmt.Errorf("the worker exited before it was ready (/readyz: %s)", last)
		case <-tick.C:
		}
		if time.Since(start) > readyWithin {
			return 0, fmt.Errorf("not ready %s after its start (/readyz: %s)", readyWithin, last)
		}
	}
}

// scrapeCounter reads an unlabelled counter from GET /metrics.
func scrapeCounter(addr, name string) (int64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return 0, fmt.Errorf("metric %s: %q: %w", name, v, err)
			}
			return int64(f), nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("metric %s not in /metrics", name)
}

// sampleHWM reads pid's VmHWM every 10 ms until exited is closed, then
// sends the last value read: the peak RSS of its life but for its last
// 10 ms. The child's rusage cannot give it: Go starts a child with vfork
// semantics, so the child's ru_maxrss includes this (parent) process's peak
// RSS at the exec (a 1M-aggregate run read the bench's 2604 MiB there, for
// every worker).
func sampleHWM(pid int, exited <-chan struct{}) <-chan int64 {
	out := make(chan int64, 1)
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		var peak int64
		for {
			peak = max(peak, vmHWM(pid))
			select {
			case <-exited:
				out <- peak
				return
			case <-tick.C:
			}
		}
	}()
	return out
}

// vmHWM is process pid's peak RSS in bytes (0 when unknown).
func vmHWM(pid int) int64 { return procStatus(strconv.Itoa(pid), "VmHWM") }

// dirBytes sums the sizes of the regular files under dir, and of its
// Pebble tables (*.sst) alone.
func dirBytes(dir string) (all, sst int64, _ error) {
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			all += info.Size()
			if strings.HasSuffix(path, ".sst") {
				sst += info.Size()
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("bench restore: size of %s: %w", dir, err)
	}
	return all, sst, nil
}

// freeAddr is a 127.0.0.1 address with a port free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
