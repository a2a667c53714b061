// Package soak is projector's process-level soak: the real `projector`
// binary, run against a persistent embedded broker in another process
// (`projector broker`), killed with SIGKILL at random (seeded) moments while
// the input is produced under it – inside transactions, between the Kafka
// commit and the Pebble write, during restore – restarted on the same state
// directory, with the broker itself restarted under load a few times, and
// checked at the end against the workload's reference model.
//
// Invariants checked (all must be zero): output dup (a projection (key,
// version) seen twice), lost (an aggregate missing or behind the model),
// aborted-visible (a record of an aborted or open transaction visible to a
// read_committed reader, on every output topic and the changelog),
// nonmonotonic (a version not above the key's previous one), projection diff
// (a final state that differs from the model, an unknown key, or a dead
// letter missing, repeated or with the wrong reason).
//
// Run it with `go run ./internal/soak/cmd/soak --events N --kills K`; the CI
// size runs as TestSoakCI.
package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/testkit"
	"github.com/projector-dev/projector/internal/workload"
)

// Topic and group names of the soak's worker configuration.
const (
	Name       = "soak"
	InputTopic = "soak-events"
	ProjTopic  = "soak-overview.v1"
	DLQTopic   = "soak-events.dlq"
)

// Options size a soak run.
type Options struct {
	Events     int    // unique valid events (the input holds more: duplicates, conflicts, …)
	Aggregates int    // default Events/10
	Kills      int    // SIGKILLs of the worker
	Seed       uint64 // workload and schedule seed
	Partitions int    // input partitions (default 4)
	// BrokerRestarts restarts the broker process (SIGTERM, start again on the
	// same directory and port) this many times while the worker runs.
	BrokerRestarts int
	// Chunks is how many pieces the input is produced in while the worker
	// runs (default max(Kills, 10)).
	Chunks int
	// KillAfter bounds the random time a worker lives before its SIGKILL
	// (default 300ms–3s after it started consuming).
	KillMin, KillMax time.Duration
	MaxRecordsPerTxn int    // default 1000
	Binary           string // the projector binary; "" builds it
	Dir              string // work directory; "" makes a temporary one (removed on success)
	Log              io.Writer
}

func (o *Options) defaults() {
	if o.Aggregates <= 0 {
		o.Aggregates = max(o.Events/10, 1)
	}
	if o.Partitions <= 0 {
		o.Partitions = 4
	}
	if o.Chunks <= 0 {
		o.Chunks = max(o.Kills, 10)
	}
	if o.KillMin <= 0 {
		o.KillMin = 300 * time.Millisecond
	}
	if o.KillMax <= o.KillMin {
		o.KillMax = o.KillMin + 2700*time.Millisecond
	}
	if o.MaxRecordsPerTxn <= 0 {
		o.MaxRecordsPerTxn = 1000
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// Result is a finished soak.
type Result struct {
	Figure  Figure
	Checked Checked
	// Kills that landed between a Kafka commit and the Pebble write: the
	// restarted worker restored records from the changelog into a state
	// directory that had them not.
	KillsBetweenCommitAndPebble int
	// WorkerExits are exits the soak did not cause (e.g. exit 1 when the
	// broker went away mid-transaction); the supervisor restarts them.
	WorkerExits    []string
	BrokerRestarts int
	Took           time.Duration
	Dir            string
}

// Build compiles the projector binary into dir.
func Build(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("soak: go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	bin := filepath.Join(dir, "projector")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/projector")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("soak: build: %v\n%s", err, b)
	}
	return bin, nil
}

// Run runs one soak and its checks. It returns an error when the soak could
// not run; a failed check is in Result (Figure.OK() false).
func Run(ctx context.Context, o Options) (res Result, err error) {
	o.defaults()
	start := time.Now()
	if o.Dir == "" {
		if o.Dir, err = os.MkdirTemp("", "projector-soak-"); err != nil {
			return res, err
		}
	}
	res.Dir = o.Dir
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return res, err
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(o.Log, "%s soak: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	if o.Binary == "" {
		logf("building projector")
		if o.Binary, err = Build(ctx, o.Dir); err != nil {
			return res, err
		}
	}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x5eed))

	// The broker in its own process, persisted to dir/broker.
	br := &brokerProc{bin: o.Binary, dir: filepath.Join(o.Dir, "broker"), partitions: o.Partitions, logDir: o.Dir}
	if err := br.start(ctx, "127.0.0.1:0"); err != nil {
		return res, err
	}
	defer br.stop()
	brokers := []string{br.addr}
	logf("broker pid %d on %s", br.cmd.Process.Pid, br.addr)
	if err := testkit.CreateTopic(ctx, brokers, InputTopic, int32(o.Partitions)); err != nil {
		return res, err
	}

	wo := workload.Defaults()
	wo.Seed, wo.Events, wo.Aggregates = o.Seed, o.Events, o.Aggregates
	recs, exp := workload.Generate(wo)
	res.Figure = Figure{Events: len(recs), Dupes: exp.Duplicates, Seed: o.Seed}
	logf("workload: %d records (%d events, %d duplicates, %d invalid, %d conflicts), %d aggregates",
		len(recs), o.Events, exp.Duplicates, exp.Invalid, exp.Conflicts, len(exp.Final))

	cfgPath := filepath.Join(o.Dir, "projector.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(workerConfig, o.MaxRecordsPerTxn, filepath.Join(o.Dir, "state"))), 0o644); err != nil {
		return res, err
	}

	// The producer: the input arrives in chunks while the worker is killed
	// and restarted. brokerMu keeps a broker restart out of a chunk (a
	// half-produced chunk retried would duplicate the conflicts and invalid
	// records whose dead letters the checker counts exactly).
	var brokerMu sync.RWMutex
	prodDone := make(chan error, 1)
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	go func() {
		chunk := (len(recs) + o.Chunks - 1) / o.Chunks
		for i := 0; i < len(recs); i += chunk {
			brokerMu.RLock()
			err := testkit.Produce(pctx, brokers, InputTopic, recs[i:min(i+chunk, len(recs))])
			brokerMu.RUnlock()
			if err != nil {
				prodDone <- err
				return
			}
			select {
			case <-pctx.Done():
				prodDone <- pctx.Err()
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
		prodDone <- nil
	}()

	// Which kill slots restart the broker instead (while the worker runs).
	restartAt := map[int]bool{}
	for len(restartAt) < min(o.BrokerRestarts, o.Kills) {
		restartAt[1+rng.IntN(max(o.Kills-1, 1))] = true
	}

	life := 0
	var w *worker
	var lifeStart int64
	startWorker := func() error {
		life++
		var err error
		lifeStart = committedSum(ctx, brokers)
		w, err = startProc(ctx, o.Binary, filepath.Join(o.Dir, "logs", fmt.Sprintf("worker-%03d.log", life)),
			"run", "--config", cfgPath, "--brokers", br.addr, "--log-format", "json", "--log-level", "info")
		return err
	}
	// restartedCount inspects a finished life's log: did its restore bring
	// back records the state directory lacked?
	countRestore := func(w *worker) {
		if life > 1 && w.restoredRecords() > 0 {
			res.KillsBetweenCommitAndPebble++
		}
	}
	if err := startWorker(); err != nil {
		return res, err
	}
	kills := 0
	producing := true
	for kills < o.Kills {
		if err := ctx.Err(); err != nil {
			w.kill()
			return res, err
		}
		// Live a random while after the worker started consuming.
		if err := w.waitStarted(2 * time.Minute); err != nil {
			w.kill()
			return res, err
		}
		// … and only once it is processing: its group has committed
		// offsets past where this life began (a kill during the group join
		// tests little).
		if err := waitProgress(ctx, brokers, lifeStart, w, 3*time.Minute); err != nil {
			w.kill()
			return res, err
		}
		d := o.KillMin + time.Duration(rng.Int64N(int64(o.KillMax-o.KillMin)))
		select {
		case <-time.After(d):
		case <-w.exited:
		}
		if producing {
			select {
			case err := <-prodDone:
				if err != nil {
					w.kill()
					return res, fmt.Errorf("soak: produce: %w", err)
				}
				producing = false
				logf("input complete")
			default:
			}
		}
		if w.hasExited() {
			// An exit we did not cause: record it, restart.
			res.WorkerExits = append(res.WorkerExits, fmt.Sprintf("life %d: exit %d: %s", life, w.code, w.tail()))
			logf("worker exited by itself (exit %d): %s", w.code, w.tail())
			if w.panicked() {
				return res, fmt.Errorf("soak: worker panicked or raced: %s", w.log)
			}
			countRestore(w)
			if err := startWorker(); err != nil {
				return res, err
			}
			continue
		}
		kills++
		if restartAt[kills] {
			// Restart the broker under load instead of this kill slot's
			// SIGKILL; the worker lives through it or exits and is
			// restarted.
			brokerMu.Lock()
			logf("restarting the broker (fault %d)", kills)
			err := br.restart(ctx)
			brokerMu.Unlock()
			if err != nil {
				w.kill()
				return res, err
			}
			res.BrokerRestarts++
			continue
		}
		w.kill()
		res.Figure.Crashes++
		countRestore(w)
		if kills%10 == 0 || kills == o.Kills {
			logf("kill %d/%d (life %d lived %s)", kills, o.Kills, life, d.Round(time.Millisecond))
		}
		if err := startWorker(); err != nil {
			return res, err
		}
	}
	if producing {
		if err := <-prodDone; err != nil {
			w.kill()
			return res, fmt.Errorf("soak: produce: %w", err)
		}
		logf("input complete")
	}
	// Let the last life catch up, then stop it cleanly (SIGTERM → exit 0).
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute+time.Duration(o.Events/5000)*time.Second)
	defer cancel()
	for {
		err := testkit.WaitCaughtUp(wctx, brokers, Name, InputTopic)
		if err == nil {
			break
		}
		if w.hasExited() && wctx.Err() == nil {
			res.WorkerExits = append(res.WorkerExits, fmt.Sprintf("life %d: exit %d: %s", life, w.code, w.tail()))
			if err := startWorker(); err != nil {
				return res, err
			}
			continue
		}
		w.kill()
		return res, err
	}
	logf("caught up; stopping the worker with SIGTERM")
	if err := w.waitStarted(time.Minute); err != nil { // its signal handler is installed by then
		w.kill()
		return res, err
	}
	if code := w.term(time.Minute); code != 0 {
		return res, fmt.Errorf("soak: worker exit %d after SIGTERM (want 0): %s", code, w.tail())
	}
	countRestore(w)
	res.Figure.Faults = res.Figure.Crashes + res.BrokerRestarts
	logf("checking")
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Minute)
	defer ccancel()
	c, err := Check(cctx, brokers, ProjTopic, DLQTopic, exp, Name+"."+InputTopic+".changelog")
	if err != nil {
		return res, err
	}
	res.Checked = c
	c.Apply(&res.Figure)
	res.Took = time.Since(start)
	logf("%s", c)
	return res, nil
}

const workerConfig = `name: soak
kafka:
  brokers: [127.0.0.1:1]      # replaced by --brokers
  instanceId: soak-1
  input: [soak-events]
  deadLetterTopic: soak-events.dlq
  effectsTopic: soak-events.effects
  maxRecordsPerTransaction: %d
  sessionTimeout: 6s
  transactionTimeout: 20s
state: {dir: %q}
http: {listen: "off"}
projections:
  - name: case-overview
    topic: soak-overview.v1
    events: {CaseOpened: merge, CaseUpdated: merge, CaseEscalated: merge, CaseClosed: delete}
`

// worker is one life of `projector run`.
type worker struct {
	cmd    *exec.Cmd
	log    string // path of its stderr
	f      *os.File
	exited chan struct{}
	code   int
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
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	w := &worker{cmd: cmd, log: logPath, f: f, exited: make(chan struct{})}
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

// committedSum is the group's committed input offsets, summed (-1 on error).
func committedSum(ctx context.Context, brokers []string) int64 {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return -1
	}
	defer cl.Close()
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	offs, err := kadm.NewClient(cl).FetchOffsets(octx, Name)
	if err != nil {
		return -1
	}
	var n int64
	offs.Each(func(o kadm.OffsetResponse) { n += o.At })
	return n
}

// waitProgress waits until the group committed past from (or the input is
// consumed, or the worker exited).
func waitProgress(ctx context.Context, brokers []string, from int64, w *worker, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		if w.hasExited() {
			return nil
		}
		if n := committedSum(ctx, brokers); n > from && from >= 0 {
			return nil
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		caught := testkit.WaitCaughtUp(cctx, brokers, Name, InputTopic) == nil
		cancel()
		if caught {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("soak: worker made no progress within %s: %s", within, w.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
