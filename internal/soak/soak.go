// Package soak is projector's process-level soak: the real `projector`
// binary, run against a persistent embedded broker in another process
// (`projector broker`), killed with SIGKILL at random (seeded) moments while
// the input is produced under it – inside transactions, between the Kafka
// commit and the Pebble write, during restore, inside webhook calls of the
// side-effect executor – restarted on the same state directory, with the
// broker itself restarted under load a few times, and checked at the end
// against the workload's reference model. The worker runs with the default
// group session settings.
//
// Invariants checked (all must be zero): output dup (a projection (key,
// version) seen twice), lost (an aggregate missing or behind the model),
// aborted-visible (a record of an aborted or open transaction visible to a
// read_committed reader, on every output topic and the changelogs),
// nonmonotonic (a version not above the key's previous one), projection diff
// (a final state that differs from the model, an unknown key, or a dead
// letter missing, repeated or with the wrong reason), and for the side
// effect (a webhook per applied CaseEscalated to a receiver the soak runs,
// which honours Idempotency-Key): a key answered 2xx again without an
// unknown attempt in the ledger to explain the retry, a request no committed
// attempt accounts for, two requests for a key in flight at once, an expected key never applied, an
// intent missing, repeated or unexpected on the effects topic, a key not
// succeeded in the ledger.
//
// Measured, black-box through the groups' committed offsets: each restart's
// latency from process start to its first committed transaction, and
// whether each kill landed while the committed offsets were moving.
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

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/testkit"
	"github.com/projector-dev/projector/internal/workload"
	"github.com/projector-dev/projector/sideeffects"
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
	// same directory and port) this many times while the worker runs, in
	// addition to the kills.
	BrokerRestarts int
	// Rate is the input produced per second (a twentieth of it every 50ms)
	// while the kills go on; production pauses while a second's worth waits
	// uncommitted (the worker is down), so every restart finds input to
	// consume and every life works under load. After the last kill the rest
	// of the input follows at once. Default: the input spread over
	// Kills+BrokerRestarts lives of KillMax plus a second each.
	Rate int
	// KillMin, KillMax bound the random time a worker lives after its first
	// committed transaction before its SIGKILL (default 300ms–3s).
	KillMin, KillMax time.Duration
	MaxRecordsPerTxn int // default 1000
	// NoEffects leaves out the side effect: by default every applied
	// CaseEscalated event is a webhook call to a receiver the soak runs,
	// which takes ReceiverMin–ReceiverMax to answer (default 20–60ms).
	NoEffects                bool
	ReceiverMin, ReceiverMax time.Duration
	// RestartBound is the restart→first-commit latency the report counts
	// restarts against (default 5s). StopAfterSlow > 0 ends the kills early
	// after that many restarts slower than RestartBound; the soak then
	// finishes and checks as usual, so that a test of the bound fails in
	// minutes rather than after Kills × the group session timeout.
	RestartBound  time.Duration
	StopAfterSlow int
	// FirstCommitTimeout bounds the wait for a life's first commit before
	// the soak gives up (default 3m).
	FirstCommitTimeout time.Duration
	Binary             string // the projector binary; "" builds it
	Dir                string // work directory; "" makes a temporary one (removed on success)
	Log                io.Writer
}

func (o *Options) defaults() {
	if o.Aggregates <= 0 {
		o.Aggregates = max(o.Events/10, 1)
	}
	if o.Partitions <= 0 {
		o.Partitions = 4
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
	if o.ReceiverMin <= 0 {
		o.ReceiverMin = 20 * time.Millisecond
	}
	if o.ReceiverMax < o.ReceiverMin {
		o.ReceiverMax = o.ReceiverMin + 40*time.Millisecond
	}
	if o.RestartBound <= 0 {
		o.RestartBound = 5 * time.Second
	}
	if o.FirstCommitTimeout <= 0 {
		o.FirstCommitTimeout = 3 * time.Minute
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// defaultRate spreads the input over the lives: each consumes about Rate ×
// (its time after the first commit, at most KillMax, plus the second's worth
// produced while it was down).
func (o *Options) defaultRate(inputRecords int) {
	if o.Rate <= 0 {
		lives := max(o.Kills+o.BrokerRestarts, 1)
		o.Rate = max(int(float64(inputRecords)/(float64(lives)*(o.KillMax+time.Second).Seconds())), 50)
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
	// Kills are the SIGKILLs, in order; KillsMoving of them landed while the
	// processor group's committed offsets were moving (they advanced after
	// the life's first commit, before the kill), KillsPending while produced input was
	// waiting uncommitted.
	Kills                     []Kill
	KillsMoving, KillsPending int
	// Restarts are the lives after a SIGKILL that committed, and
	// RestartLatency their process start → first committed transaction.
	Restarts       []Restart
	RestartLatency Dist
	// StoppedEarly says why the kills stopped before Options.Kills ("" when
	// they did not).
	StoppedEarly string
	Rate         int // input records per second while killing
	Took         time.Duration
	Dir          string
}

// KillsMovingShare is the share of the kills that landed while offsets were
// moving (0 without kills).
func (r Result) KillsMovingShare() float64 {
	if len(r.Kills) == 0 {
		return 0
	}
	return float64(r.KillsMoving) / float64(len(r.Kills))
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
	start := time.Now()
	o.defaults()
	wo := workload.Defaults()
	wo.Seed, wo.Events, wo.Aggregates = o.Seed, o.Events, o.Aggregates
	recs, exp := workload.Generate(wo)
	o.defaultRate(len(recs))
	res.Rate = o.Rate
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
	off, err := newOffsets(brokers)
	if err != nil {
		return res, err
	}
	defer off.close()

	res.Figure = Figure{Events: len(recs), Dupes: exp.Duplicates, Seed: o.Seed}
	logf("workload: %d records (%d events, %d duplicates, %d invalid, %d conflicts), %d aggregates; input at %d records/s while killing",
		len(recs), o.Events, exp.Duplicates, exp.Invalid, exp.Conflicts, len(exp.Final), o.Rate)

	var (
		rcv        *receiver
		effectKeys map[string]bool
		effects    string
	)
	if !o.NoEffects {
		if rcv, err = startReceiver(o.ReceiverMin, o.ReceiverMax, o.Seed); err != nil {
			return res, err
		}
		defer rcv.close()
		effectKeys = ExpectedEffectKeys(recs)
		effects = fmt.Sprintf(effectsConfig, EffectName, EffectOn, rcv.url)
		logf("side effect %s on %s: %d keys expected; receiver %s answers in %s–%s", EffectName, EffectOn, len(effectKeys), rcv.url, o.ReceiverMin, o.ReceiverMax)
	}
	cfgPath := filepath.Join(o.Dir, "projector.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(workerConfig, o.MaxRecordsPerTxn, filepath.Join(o.Dir, "state"))+effects), 0o644); err != nil {
		return res, err
	}

	// The producer: the input arrives in chunks, at o.Rate (a twentieth of
	// it every 50ms), while the worker is killed and restarted, and pauses
	// while a second's worth waits uncommitted. brokerMu keeps a broker
	// restart out of a chunk (a half-produced chunk retried would duplicate
	// the conflicts and invalid records whose dead letters the checker
	// counts exactly).
	var brokerMu sync.RWMutex
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DisableIdempotentWrite(), kgo.ProducerLinger(0),
		kgo.MaxBufferedRecords(100_000), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		return res, err
	}
	defer prod.Close()
	prodDone := make(chan error, 1)
	unthrottle := make(chan struct{})
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	go func() {
		const ticks = 20 // a second
		chunk, backlog := max(o.Rate/ticks, 1), int64(max(o.Rate, 1))
		tick := time.NewTicker(time.Second / ticks)
		defer tick.Stop()
		throttled := true
		for i := 0; i < len(recs); {
			n := 5000
			if throttled {
				select {
				case <-pctx.Done():
					prodDone <- pctx.Err()
					return
				case <-unthrottle:
					throttled = false
					continue
				case <-tick.C:
				}
				if p, err := off.pending(pctx); err != nil || p >= backlog {
					continue
				}
				n = chunk
			}
			brokerMu.RLock()
			err := produce(pctx, prod, recs[i:min(i+n, len(recs))])
			brokerMu.RUnlock()
			if err != nil {
				prodDone <- err
				return
			}
			i += n
		}
		prodDone <- nil
	}()
	producing := true
	inputDone := func(block bool) error {
		if !producing {
			return nil
		}
		if block {
			if err := <-prodDone; err != nil {
				return fmt.Errorf("soak: produce: %w", err)
			}
		} else {
			select {
			case err := <-prodDone:
				if err != nil {
					return fmt.Errorf("soak: produce: %w", err)
				}
			default:
				return nil
			}
		}
		producing = false
		logf("input complete")
		return nil
	}

	// Which fault slots restart the broker instead of a SIGKILL.
	slots := o.Kills + o.BrokerRestarts
	restartAt := map[int]bool{}
	for len(restartAt) < min(o.BrokerRestarts, max(slots-1, 0)) {
		restartAt[1+rng.IntN(max(slots-1, 1))] = true
	}

	life := 0
	var (
		w         *worker
		base      commits // the groups' committed offsets when this life started
		afterKill bool    // this life follows a SIGKILL
	)
	startWorker := func(killed bool) error {
		life++
		var err error
		if base, err = off.readRetry(ctx, time.Minute); err != nil {
			return err
		}
		afterKill = killed
		w, err = startProc(ctx, o.Binary, filepath.Join(o.Dir, "logs", fmt.Sprintf("worker-%03d.log", life)),
			"run", "--config", cfgPath, "--brokers", br.addr, "--log-format", "json", "--log-level", "info")
		return err
	}
	// countRestore inspects a finished life's log: did its restore bring
	// back records the state directory lacked?
	countRestore := func(w *worker) {
		if life > 1 && w.restoredRecords() > 0 {
			res.KillsBetweenCommitAndPebble++
		}
	}
	selfExit := func() error {
		res.WorkerExits = append(res.WorkerExits, fmt.Sprintf("life %d: exit %d: %s", life, w.code, w.tail()))
		logf("worker exited by itself (exit %d): %s", w.code, w.tail())
		if w.panicked() {
			return fmt.Errorf("soak: worker panicked or raced: %s", w.log)
		}
		countRestore(w)
		return startWorker(false)
	}
	if err := startWorker(false); err != nil {
		return res, err
	}
	var latencies []time.Duration
	slot, slow := 0, 0
	// restarted records a life's first commit after a SIGKILL.
	restarted := func(m moved) {
		afterKill = false // measured once per life
		lat := m.at.Sub(w.started)
		latencies = append(latencies, lat)
		res.Restarts = append(res.Restarts, Restart{Life: life, FirstCommit: lat, By: m.by})
		if lat > o.RestartBound {
			slow++
		}
		logf("life %d: first commit %s after its start (%s offsets moved)", life, lat.Round(time.Millisecond), m.by)
	}
	for slot < slots {
		if err := ctx.Err(); err != nil {
			w.kill()
			return res, err
		}
		if err := w.waitStarted(2 * time.Minute); err != nil {
			w.kill()
			return res, err
		}
		// Wait for the life's first committed transaction: a kill during the
		// group join tests little, and after a kill this is the restart
		// latency.
		moved, err := off.waitMoved(ctx, base, w, o.FirstCommitTimeout)
		if err != nil {
			w.kill()
			return res, fmt.Errorf("soak: life %d: %w: %s", life, err, w.tail())
		}
		if moved.by == "" { // exited while waiting
			if err := selfExit(); err != nil {
				return res, err
			}
			continue
		}
		if afterKill {
			restarted(moved)
			if o.StopAfterSlow > 0 && slow >= o.StopAfterSlow {
				res.StoppedEarly = fmt.Sprintf("%d restarts took longer than %s to commit", slow, o.RestartBound)
				logf("stopping the kills early: %s", res.StoppedEarly)
				break
			}
		}
		// Offsets at the life's first commit: a kill counts as "while
		// offsets move" only if the processor committed again after it,
		// in the random while below (the first commit itself is what
		// waitMoved waited for, so it proves nothing).
		atFirst, err := off.readRetry(ctx, time.Minute)
		if err != nil {
			w.kill()
			return res, err
		}
		// Live a random while under load, then strike at the next moment
		// the processor has input it has not committed (the input arrives
		// every 50ms and is often processed within a few ms; striking
		// then puts the kill inside its work).
		d := o.KillMin + time.Duration(rng.Int64N(int64(o.KillMax-o.KillMin)))
		select {
		case <-time.After(d):
		case <-w.exited:
		}
		pending := off.waitPending(ctx, w, time.Second)
		if err := inputDone(false); err != nil {
			w.kill()
			return res, err
		}
		if !producing && pending == 0 && !w.hasExited() {
			// A restart now would find nothing to commit.
			res.StoppedEarly = fmt.Sprintf("the input ran out after %d kills (more --events or a lower --rate)", len(res.Kills))
			logf("stopping the kills early: %s", res.StoppedEarly)
			break
		}
		if w.hasExited() {
			if err := selfExit(); err != nil {
				return res, err
			}
			continue
		}
		slot++
		if restartAt[slot] {
			// Restart the broker under load instead of this slot's SIGKILL;
			// the worker lives through it or exits and is restarted.
			brokerMu.Lock()
			logf("restarting the broker (fault %d)", slot)
			err := br.restart(ctx)
			brokerMu.Unlock()
			if err != nil {
				w.kill()
				return res, err
			}
			res.BrokerRestarts++
			// The kill that follows waits for this life's progress after
			// the broker came back.
			if base, err = off.readRetry(ctx, time.Minute); err != nil {
				w.kill()
				return res, err
			}
			continue
		}
		k := Kill{Life: life, Lived: time.Since(moved.at), Pending: pending}
		now, cerr := off.read(ctx)
		w.kill()
		k.Moving = cerr == nil && now.proc > atFirst.proc
		res.Kills = append(res.Kills, k)
		if k.Moving {
			res.KillsMoving++
		}
		if k.Pending > 0 {
			res.KillsPending++
		}
		res.Figure.Crashes++
		countRestore(w)
		logf("kill %d/%d: life %d killed %s after its first commit; processor offsets moving %t, %d input records pending",
			len(res.Kills), o.Kills, life, k.Lived.Round(time.Millisecond), k.Moving, k.Pending)
		// A commit the dead process sent just before its kill may still be
		// landing: let it, so it is not taken for the next life's.
		time.Sleep(50 * time.Millisecond)
		if err := startWorker(true); err != nil {
			return res, err
		}
	}
	// The last kill's restart, measured like the others (the input is still
	// paced, so it has records waiting).
	if afterKill {
		m, err := off.waitMoved(ctx, base, w, o.FirstCommitTimeout)
		if err != nil {
			w.kill()
			return res, fmt.Errorf("soak: life %d: %w: %s", life, err, w.tail())
		}
		if m.by != "" {
			restarted(m)
		}
	}
	res.RestartLatency = Summarise(latencies, o.RestartBound)
	if len(res.Kills) > 0 {
		logf("restart → first commit: %s", res.RestartLatency)
		logf("kills while offsets moving: %d/%d; with input pending: %d/%d", res.KillsMoving, len(res.Kills), res.KillsPending, len(res.Kills))
	}
	close(unthrottle)
	if err := inputDone(true); err != nil {
		w.kill()
		return res, err
	}
	// Let the last life catch up – the processor on the input, the executor
	// with every expected key settled – then stop it cleanly
	// (SIGTERM → exit 0).
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute+time.Duration(o.Events/5000)*time.Second)
	defer cancel()
	caughtUp := func() error {
		if err := testkit.WaitCaughtUp(wctx, brokers, Name, InputTopic); err != nil {
			return err
		}
		if rcv == nil {
			return nil
		}
		// The executor's committed offsets stop short of the effects
		// topic's end (its last transaction marker): it has caught up when
		// every expected key has succeeded in its ledger.
		for {
			unsettled, _, _, err := ledgerSettled(wctx, brokers, effectKeys)
			if err == nil && unsettled == 0 {
				return nil
			}
			if w.hasExited() {
				return fmt.Errorf("soak: worker exited with %d keys unsettled", unsettled)
			}
			select {
			case <-wctx.Done():
				return fmt.Errorf("soak: %d side-effect keys not settled: %v: %w", unsettled, err, wctx.Err())
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	for {
		err := caughtUp()
		if err == nil {
			break
		}
		if w.hasExited() && wctx.Err() == nil {
			if err := selfExit(); err != nil {
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
	txnTopics := []string{Name + "." + InputTopic + ".changelog"}
	if rcv != nil {
		txnTopics = append(txnTopics, EffectsTopic, sideeffects.ChangelogTopic(Name, EffectsTopic))
	}
	c, err := Check(cctx, brokers, ProjTopic, DLQTopic, exp, txnTopics...)
	if err != nil {
		return res, err
	}
	if rcv != nil {
		e, err := checkEffects(cctx, brokers, rcv, effectKeys)
		if err != nil {
			return res, err
		}
		c.Effects = &e
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
  transactionTimeout: 20s
state: {dir: %q}
http: {listen: "off"}
projections:
  - name: case-overview
    topic: soak-overview.v1
    events: {CaseOpened: merge, CaseUpdated: merge, CaseEscalated: merge, CaseClosed: delete}
`

// effectsConfig is the soak's side effect: a webhook per applied
// CaseEscalated event, retried after an unknown outcome (the receiver
// honours Idempotency-Key); enough attempts that kills inside calls never
// exhaust them.
const effectsConfig = `sideEffects:
  - name: %s
    on: [%s]
    key: "notify:{aggregateId}:v{aggregateVersion}"
    webhook: {url: %q, timeout: 2s}
    maxAttempts: 50
    onUnknown: retry
`

// produce writes recs to the input, key-hash partitioned like
// testkit.Produce, synchronously. The client is not idempotent: no request
// is in flight across a broker restart (brokerMu), and the restarted broker
// need not know the producer's sequence numbers.
func produce(ctx context.Context, cl *kgo.Client, recs []workload.Record) error {
	batch := make([]*kgo.Record, 0, len(recs))
	for _, r := range recs {
		batch = append(batch, &kgo.Record{Topic: InputTopic, Key: r.Key, Value: r.Value})
	}
	return cl.ProduceSync(ctx, batch...).FirstErr()
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
