// The soak's child processes: the broker (brokerProc) and the worker
// lives (worker), each logging to its own file.

package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/projector-dev/projector/internal/app/broker"
)

// brokerProc is the broker in its own process: `projector broker`, or, for a
// binary built before that command existed, this program re-executed as a
// broker (see BrokerChild).
type brokerProc struct {
	bin        string
	dir        string
	partitions int
	logDir     string
	addr       string
	cmd        *exec.Cmd
	exited     chan struct{}
	starts     int
}

const childEnv = "PROJECTOR_SOAK_BROKER_CHILD"

func (b *brokerProc) start(ctx context.Context, listen string) error {
	b.starts++
	args := []string{"broker", "--dir", b.dir, "--listen", listen, "--partitions", strconv.Itoa(b.partitions)}
	cmd := exec.Command(b.bin, args...)
	if !b.binaryHasBroker() {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		cmd = exec.Command(self)
		cmd.Env = append(os.Environ(), childEnv+"="+strings.Join(args[1:], "\x1f"))
	}
	logf, err := os.Create(filepath.Join(b.logDir, fmt.Sprintf("broker-%d.log", b.starts)))
	if err != nil {
		return err
	}
	cmd.Stderr = logf
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	b.cmd = cmd
	b.exited = make(chan struct{})
	addrCh := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
				addrCh <- a
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	go func() { _ = cmd.Wait(); logf.Close(); close(b.exited) }()
	select {
	case b.addr = <-addrCh:
		return nil
	case <-b.exited:
		data, _ := os.ReadFile(logf.Name())
		return fmt.Errorf("soak: broker exited at start: %s", data)
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		return fmt.Errorf("soak: broker did not start within a minute")
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return ctx.Err()
	}
}

var hasBroker = map[string]bool{}

// binaryHasBroker reports whether the projector binary has the broker command.
func (b *brokerProc) binaryHasBroker() bool {
	if v, ok := hasBroker[b.bin]; ok {
		return v
	}
	err := exec.Command(b.bin, "broker", "--help").Run()
	hasBroker[b.bin] = err == nil
	return err == nil
}

// stop sends SIGTERM (the broker persists its log and exits).
func (b *brokerProc) stop() {
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.exited:
	case <-time.After(time.Minute):
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
	b.cmd = nil
}

// restart stops the broker and starts it again on the same directory and port.
func (b *brokerProc) restart(ctx context.Context) error {
	b.stop()
	var err error
	for range 50 { // the port may take a moment to be free again
		if err = b.start(ctx, b.addr); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond) // sleep ok: retry pause while the port is released
	}
	return err
}

// BrokerChild runs the embedded broker when this process was started as the
// soak's broker child (see brokerProc) and then exits; otherwise it returns
// at once. Call it first in main and TestMain.
func BrokerChild() {
	spec, ok := os.LookupEnv(childEnv)
	if !ok {
		return
	}
	args := strings.Split(spec, "\x1f")
	o := broker.Options{}
	for i := 0; i+1 < len(args); i += 2 {
		switch args[i] {
		case "--dir":
			o.Dir = args[i+1]
		case "--listen":
			o.Listen = args[i+1]
		case "--partitions":
			o.Partitions, _ = strconv.Atoi(args[i+1])
		}
	}
	b, err := broker.Start(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("listening on %s\n", b.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	<-ctx.Done()
	stop()
	b.Close()
	os.Exit(0)
}

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
		time.Sleep(20 * time.Millisecond) // sleep ok: poll pause of a wait for the start line
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
