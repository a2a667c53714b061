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
	w, err := startRestoreWorker(o, workerSpec{broker: brokerAddr, dir: dir, name: fmt.Sprintf("r%d", run), instance: "restore-1",
		profile: fmt.Sprintf("%d-r%d", n, run)})
	if err != nil {
		return r, err
	}
	defer w.close()
	r.Log = w.log
	if r.Ready, err = waitReady(ctx, w.addr, w.exited, w.start); err != nil {
		return r, fmt.Errorf("bench restore: %d aggregates, run %d: %w (log: %s)", n, run, err, r.Log)
	}
	r.ReadyRSS = vmHWM(w.cmd.Process.Pid)
	if r.Restored, err = scrapeCounter(w.addr, "projector_restore_records_total"); err != nil {
		return r, fmt.Errorf("bench restore: %d aggregates, run %d: %w", n, run, err)
	}
	r.ExitCode = w.stop()
	r.PeakRSS = <-w.peak
	r.StateBytes, r.SSTBytes, err = dirBytes(w.stateDir)
	return r, err
}

// workerSpec is one measured worker's place: its name (of its state
// directory, configuration and log in dir), its kafka.instanceId and the
// configuration it adds (standby mode), and its CPU profile's suffix.
type workerSpec struct {
	broker, dir, name, instance string
	kafkaExtra, stateExtra      string // appended to the kafka and state sections of restoreConfig
	profile                     string
}

// restoreWorker is a started worker process: one goroutine waits for it
// (exited is closed then) and one samples its VmHWM (peak, sent once it
// exited).
type restoreWorker struct {
	cmd           *exec.Cmd
	exited        chan struct{}
	peak          <-chan int64
	addr          string // its http.listen
	stateDir, log string
	start         time.Time
}

// startRestoreWorker starts the projector binary as a fresh worker (its state
// directory emptied first) with spec's configuration.
func startRestoreWorker(o RestoreOptions, spec workerSpec) (*restoreWorker, error) {
	w := &restoreWorker{stateDir: filepath.Join(spec.dir, "state-"+spec.name), log: filepath.Join(spec.dir, "worker-"+spec.name+".log"), exited: make(chan struct{})}
	if err := os.RemoveAll(w.stateDir); err != nil {
		return nil, err
	}
	var err error
	if w.addr, err = freeAddr(); err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(spec.dir, "worker-"+spec.name+".yaml")
	cfg := fmt.Appendf(nil, restoreConfig, spec.broker, spec.instance, spec.kafkaExtra, w.stateDir, spec.stateExtra, w.addr)
	if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(w.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	w.cmd = exec.Command(o.Binary, "run", "--config", cfgPath, "--role", "processor", "--log-format", "json", "--log-level", "info")
	w.cmd.Stdout, w.cmd.Stderr = logf, logf
	if o.CPUProfile != "" {
		w.cmd.Env = append(os.Environ(), "PROJECTOR_CPUPROFILE="+o.CPUProfile+"."+spec.profile)
	}
	w.start = time.Now()
	if err := w.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench restore: start the worker: %w", err)
	}
	go func() { _ = w.cmd.Wait(); close(w.exited) }()
	w.peak = sampleHWM(w.cmd.Process.Pid, w.exited)
	return w, nil
}

// close kills the worker if it still runs (an error before its stop) and
// removes its state directory.
func (w *restoreWorker) close() {
	select {
	case <-w.exited:
	default:
		_ = w.cmd.Process.Kill()
		<-w.exited
	}
	_ = os.RemoveAll(w.stateDir)
}

// stop sends SIGTERM and returns the exit code (-1 when it had to be killed
// after a minute).
func (w *restoreWorker) stop() int { return stop(w.cmd, w.exited) }

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
