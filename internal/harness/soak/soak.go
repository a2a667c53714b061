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
// Run it with `go run ./internal/harness/soak/cmd/soak --events N --kills K`; the CI
// size runs as TestSoakCI.
package soak

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/projector-dev/projector/internal/core/changelog"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
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

// Build compiles the projector binary into dir (testkit.BuildProjector:
// through the go command's cache of executables, so that an unchanged tree
// is not linked again).
func Build(ctx context.Context, dir string) (string, error) {
	bin, err := testkit.BuildProjector(ctx, dir)
	if err != nil {
		return "", fmt.Errorf("soak: %w", err)
	}
	return bin, nil
}

// Run runs one soak and its checks. It returns an error when the soak could
// not run; a failed check is in Result (Figure.OK() false).
func Run(ctx context.Context, o Options) (Result, error) {
	start := time.Now()
	o.defaults()
	wo := workload.Defaults()
	wo.Seed, wo.Events, wo.Aggregates = o.Seed, o.Events, o.Aggregates
	recs, exp := workload.Generate(wo)
	o.defaultRate(len(recs))
	r := &run{o: o, rng: rand.New(rand.NewPCG(o.Seed, o.Seed^0x5eed))}
	defer r.close()
	r.res.Rate = o.Rate
	if err := r.setup(ctx, recs, exp); err != nil {
		return r.res, err
	}
	if err := r.faults(ctx); err != nil {
		return r.res, err
	}
	if err := r.stop(ctx); err != nil {
		return r.res, err
	}
	r.logf("checking")
	if err := r.check(ctx, exp); err != nil {
		return r.res, err
	}
	r.res.Took = time.Since(start)
	r.logf("%s", r.res.Checked)
	return r.res, nil
}

// run is one soak in progress: the broker and worker processes, the input
// feeder, the receiver of the side effect, and what was seen so far.
type run struct {
	o       Options
	res     Result
	rng     *rand.Rand
	closers []func() // run in reverse by close
	br      *brokerProc
	brokers []string
	off     *offsets
	in      *feeder
	cfgPath string
	// rcv is the side effect's receiver and effectKeys the keys it must
	// see; nil without the side effect.
	rcv        *receiver
	effectKeys map[string]bool

	life      int
	w         *worker
	base      commits // the groups' committed offsets when this life started
	afterKill bool    // this life follows a SIGKILL
	latencies []time.Duration
	slow      int // restarts slower than RestartBound
}

func (r *run) logf(format string, args ...any) {
	fmt.Fprintf(r.o.Log, "%s soak: %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// onClose has close run f (closers run in reverse, like defers).
func (r *run) onClose(f func()) { r.closers = append(r.closers, f) }

func (r *run) close() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
}

// setup makes the work directory, builds the binary if needed, starts the
// broker (in its own process, persisted to dir/broker), the receiver and the
// input feeder, and writes the worker's configuration.
func (r *run) setup(ctx context.Context, recs []workload.Record, exp workload.Expect) error {
	o := &r.o
	var err error
	if o.Dir == "" {
		if o.Dir, err = os.MkdirTemp("", "projector-soak-"); err != nil {
			return err
		}
	}
	r.res.Dir = o.Dir
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return err
	}
	if o.Binary == "" {
		r.logf("building projector")
		if o.Binary, err = Build(ctx, o.Dir); err != nil {
			return err
		}
	}
	r.br = &brokerProc{bin: o.Binary, dir: filepath.Join(o.Dir, "broker"), partitions: o.Partitions, logDir: o.Dir}
	if err := r.br.start(ctx, "127.0.0.1:0"); err != nil {
		return err
	}
	r.onClose(r.br.stop)
	r.brokers = []string{r.br.addr}
	r.logf("broker pid %d on %s", r.br.cmd.Process.Pid, r.br.addr)
	if err := testkit.CreateTopic(ctx, r.brokers, InputTopic, int32(o.Partitions)); err != nil {
		return err
	}
	if r.off, err = newOffsets(r.brokers); err != nil {
		return err
	}
	r.onClose(r.off.close)
	r.res.Figure = Figure{Events: len(recs), Dupes: exp.Duplicates, Seed: o.Seed}
	r.logf("workload: %d records (%d events, %d duplicates, %d invalid, %d conflicts), %d aggregates; input at %d records/s while killing",
		len(recs), o.Events, exp.Duplicates, exp.Invalid, exp.Conflicts, len(exp.Final), o.Rate)
	effects := ""
	if !o.NoEffects {
		if r.rcv, err = startReceiver(o.ReceiverMin, o.ReceiverMax, o.Seed); err != nil {
			return err
		}
		r.onClose(r.rcv.close)
		if r.effectKeys, err = ExpectedEffectKeys(recs); err != nil {
			return err
		}
		effects = fmt.Sprintf(effectsConfig, EffectName, EffectOn, r.rcv.url)
		r.logf("side effect %s on %s: %d keys expected; receiver %s answers in %s–%s", EffectName, EffectOn, len(r.effectKeys), r.rcv.url, o.ReceiverMin, o.ReceiverMax)
	}
	r.cfgPath = filepath.Join(o.Dir, "projector.yaml")
	if err := os.WriteFile(r.cfgPath, []byte(fmt.Sprintf(workerConfig, o.MaxRecordsPerTxn, filepath.Join(o.Dir, "state"))+effects), 0o644); err != nil {
		return err
	}
	r.in, err = startFeeder(ctx, r.brokers, r.off, recs, o.Rate, r.logf)
	if err != nil {
		return err
	}
	r.onClose(r.in.close)
	return nil
}

// startWorker starts the next life of the worker; killed says it follows a
// SIGKILL (its first commit is then a restart's latency).
func (r *run) startWorker(ctx context.Context, killed bool) error {
	r.life++
	var err error
	if r.base, err = r.off.readRetry(ctx, time.Minute); err != nil {
		return err
	}
	r.afterKill = killed
	r.w, err = startProc(ctx, r.o.Binary, filepath.Join(r.o.Dir, "logs", fmt.Sprintf("worker-%03d.log", r.life)),
		"run", "--config", r.cfgPath, "--brokers", r.br.addr, "--log-format", "json", "--log-level", "info")
	return err
}

// countRestore inspects a finished life's log: did its restore bring back
// records the state directory lacked?
func (r *run) countRestore() {
	if r.life > 1 && r.w.restoredRecords() > 0 {
		r.res.KillsBetweenCommitAndPebble++
	}
}

// selfExit records a worker exit the soak did not cause and starts the next
// life (a panic or a race ends the soak).
func (r *run) selfExit(ctx context.Context) error {
	w := r.w
	r.res.WorkerExits = append(r.res.WorkerExits, fmt.Sprintf("life %d: exit %d: %s", r.life, w.code, w.tail()))
	r.logf("worker exited by itself (exit %d): %s", w.code, w.tail())
	if w.panicked() {
		return fmt.Errorf("soak: worker panicked or raced: %s", w.log)
	}
	r.countRestore()
	return r.startWorker(ctx, false)
}

// restarted records a life's first commit after a SIGKILL.
func (r *run) restarted(m moved) {
	r.afterKill = false // measured once per life
	lat := m.at.Sub(r.w.started)
	r.latencies = append(r.latencies, lat)
	r.res.Restarts = append(r.res.Restarts, Restart{Life: r.life, FirstCommit: lat, By: m.by})
	if lat > r.o.RestartBound {
		r.slow++
	}
	r.logf("life %d: first commit %s after its start (%s offsets moved)", r.life, lat.Round(time.Millisecond), m.by)
}

// stop lets the last life catch up – the processor on the input, the
// executor with every expected key settled – then stops it cleanly
// (SIGTERM → exit 0).
func (r *run) stop(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute+time.Duration(r.o.Events/5000)*time.Second)
	defer cancel()
	for {
		err := r.caughtUp(wctx)
		if err == nil {
			break
		}
		if r.w.hasExited() && wctx.Err() == nil {
			if err := r.selfExit(ctx); err != nil {
				return err
			}
			continue
		}
		r.w.kill()
		return err
	}
	r.logf("caught up; stopping the worker with SIGTERM")
	if err := r.w.waitStarted(time.Minute); err != nil { // its signal handler is installed by then
		r.w.kill()
		return err
	}
	if code := r.w.term(time.Minute); code != 0 {
		return fmt.Errorf("soak: worker exit %d after SIGTERM (want 0): %s", code, r.w.tail())
	}
	r.countRestore()
	r.res.Figure.Faults = r.res.Figure.Crashes + r.res.BrokerRestarts
	return nil
}

// caughtUp waits until the processor committed the whole input and, with the
// side effect, every expected key succeeded in the executor's ledger.
func (r *run) caughtUp(wctx context.Context) error {
	if err := testkit.WaitCaughtUp(wctx, r.brokers, Name, InputTopic); err != nil {
		return err
	}
	if r.rcv == nil {
		return nil
	}
	// The executor's committed offsets stop short of the effects topic's end
	// (its last transaction marker): it has caught up when every expected
	// key has succeeded in its ledger.
	for {
		unsettled, _, _, err := ledgerSettled(wctx, r.brokers, r.effectKeys)
		if err == nil && unsettled == 0 {
			return nil
		}
		if r.w.hasExited() {
			return fmt.Errorf("soak: worker exited with %d keys unsettled", unsettled)
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("soak: %d side-effect keys not settled: %v: %w", unsettled, err, wctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// check runs the checks on the outputs, the changelogs and the side effect.
func (r *run) check(ctx context.Context, exp workload.Expect) error {
	cctx, ccancel := context.WithTimeout(ctx, 10*time.Minute)
	defer ccancel()
	txnTopics := []string{changelog.Topic(Name, InputTopic)}
	if r.rcv != nil {
		txnTopics = append(txnTopics, EffectsTopic, sideeffects.ChangelogTopic(Name, EffectsTopic))
	}
	c, err := Check(cctx, r.brokers, ProjTopic, DLQTopic, exp, txnTopics...)
	if err != nil {
		return err
	}
	if r.rcv != nil {
		e, err := checkEffects(cctx, r.brokers, r.rcv, r.effectKeys)
		if err != nil {
			return err
		}
		c.Effects = &e
	}
	r.res.Checked = c
	c.Apply(&r.res.Figure)
	return nil
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
