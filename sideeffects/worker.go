package sideeffects

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/core/acl"
	"github.com/projector-dev/projector/internal/core/changelog"
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/seam"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// ErrRevoked is returned to a Runner whose partition was revoked.
var ErrRevoked = errors.New("sideeffects: partition revoked")

// errLoopStopped answers a Runner's Update once the worker's loop is gone.
var errLoopStopped = errors.New("sideeffects: executor loop stopped")

// WorkerConfig configures the executor worker.
type WorkerConfig struct {
	// Session is who the executor is in Kafka and its transactions'
	// bounds: Name, InstanceID and Brokers are required.
	Session

	// StateDir is the directory of the executor's local state: the worker
	// opens its StateStore there in NewWorker and closes it when Run
	// returns. Set it or Store.
	StateDir string
	// Store is a store opened with OpenStateStore, for a caller that
	// manages it (the worker never closes it). Set it or StateDir.
	Store *StateStore

	// EffectsTopic is the topic of the intents the processor produces
	// (processor.Config.EffectsTopic); default <Name>.effects. Created
	// when missing.
	EffectsTopic string
	// Effects are how each configured effect is called, by name
	// (EffectsFromConfig builds them from the effect rules).
	Effects map[string]Effect
	// Workers bounds concurrent calls per owned partition; default
	// DefaultWorkers.
	Workers int
	// OnChange is called after every committed ledger transition.
	OnChange func(effect.Entry)

	// seams: what only the repository's own code sets (internal/core/seam).
	seams seam.Seams
}

// Group is the executor's consumer group.
func (c *WorkerConfig) Group() string { return executorGroup(c.Name) }

// executorGroup is the consumer group of the executor named name.
func executorGroup(name string) string { return name + "-executor" }

// ChangelogTopic is the ledger's changelog for the effects topic: the
// executor group's changelog of it, named as the processor names its own
// (changelog.Topic).
func ChangelogTopic(name, effectsTopic string) string {
	return changelog.Topic(executorGroup(name), effectsTopic)
}

// Worker is the side-effect executor: it consumes intents from the effects
// topic into the keyed ledger (inside exactly-once transactions, with the
// ledger's own changelog) and runs one Runner per owned partition. Every
// ledger transition a Runner makes — in-flight before the call above all —
// is committed through the same loop before the Runner goes on.
type Worker struct {
	cfg WorkerConfig
	// store is the local state (WorkerConfig.Store's, or opened in
	// StateDir: then ownStore, and Run closes it).
	store    *state.Store
	ownStore bool
	// loop holds the owned partitions' workerTasks (their runners); a
	// runner's own goroutine reaches its workerTask through its taskStore.
	loop *eos.Loop[*workerTask]

	mu       sync.Mutex
	requests []*request
	// stopped is set under mu by failRequests, once the loop is gone:
	// from then on a Runner's Update is refused, since nothing would
	// answer a request queued after it (taskStore.Update).
	stopped bool
	// testHook, set only by tests, runs at the named points of the
	// request queue (hookEnqueue, hookRequestsFailed) so that a test can
	// make a race between them happen on purpose. Nil in production.
	testHook func(point string)

	runnersWG sync.WaitGroup
	runCtx    context.Context
	stats     *WorkerStats
	// calls is shared by all the worker's Runners: a partition's new Runner
	// must see the calls its revoked predecessor still has in flight.
	calls *callRegistry
	// reporter produces outcome reports (report) outside the loop's
	// transactions; it lives while Run does.
	reportMu sync.Mutex
	reporter *kgo.Client
}

// NewWorker validates cfg and returns a worker; call Run once.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if err := cfg.applyDefaults(); err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, stats: &WorkerStats{loop: eos.NewStats(), byES: map[[2]string]int64{}, runners: map[*Runner]bool{}}}
	if err := w.openStore(); err != nil {
		return nil, err
	}
	w.calls = newCallRegistry()
	ses := cfg.Session.eos(w.store, cfg.seams)
	lc := ses.LoopConfig(cfg.Group())
	// The effects topic is projector's own: whoever starts first creates it.
	lc.CreateInputs = true
	lc.Inputs = []string{cfg.EffectsTopic}
	// The outcome reports (report) write to the effects topic, outside the
	// loop's transactions and rarely: checked at start with the loop's own.
	lc.Needs = []acl.Need{acl.Topic(cfg.EffectsTopic, kmsg.ACLOperationWrite, "report a call's outcome after a revoke")}
	lc.ChangelogOf = func(in string) string { return ChangelogTopic(cfg.Name, in) }
	lc.Restore = restoreLedgerRecord
	lc.Stats = w.stats.loop
	w.loop = eos.New(lc, (*workerHandler)(w))
	return w, nil
}

// applyDefaults checks the required settings and fills the defaults.
func (c *WorkerConfig) applyDefaults() error {
	if c.Name != "" && c.EffectsTopic == "" {
		c.EffectsTopic = c.Name + ".effects"
	}
	if c.Name != "" && c.DeadLetterTopic == "" {
		c.DeadLetterTopic = c.Name + ".dlq"
	}
	if c.Name == "" || c.InstanceID == "" || len(c.Brokers) == 0 || (c.Store == nil && c.StateDir == "" && c.seams.Store == nil) {
		return errors.New("sideeffects: worker needs Name, InstanceID, Brokers, and StateDir or Store")
	}
	if c.Store != nil && c.Store.st == nil {
		return errors.New("sideeffects: Store is closed")
	}
	if c.Partitions <= 0 {
		c.Partitions = DefaultPartitions
	}
	if c.MaxRecordsPerTxn <= 0 {
		c.MaxRecordsPerTxn = DefaultMaxRecordsPerTxn
	}
	if c.TransactionTimeout <= 0 {
		c.TransactionTimeout = DefaultTransactionTimeout
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.seams.Now == nil {
		c.seams.Now = time.Now
	}
	return nil
}

// openStore sets the store the worker runs on: the one the seams give (the
// caller's), WorkerConfig.Store's, or one it opens in StateDir and closes
// when Run returns.
func (w *Worker) openStore() error {
	switch c := &w.cfg; {
	case c.seams.Store != nil:
		w.store = c.seams.Store
	case c.Store != nil:
		w.store = c.Store.st
	default:
		s, err := OpenStateStore(c.StateDir, 0)
		if err != nil {
			return err
		}
		w.store, w.ownStore = s.st, true
	}
	return nil
}

// Stats returns the worker's counters.
func (w *Worker) Stats() *WorkerStats { return w.stats }

// restoreLedgerRecord is the worker's eos.Config.Restore: every ledger
// entry is decoded as it is restored, and must be the entry of the key it
// is filed under, so that a corrupt record stops the restore there, named
// (changelog.CorruptError: topic, partition, offset), instead of stopping
// the partition's Runner later at Recover without saying where
// (docs/contract.md#corrupt-changelog-records).
func restoreLedgerRecord(key, value []byte, _ time.Time, emit func(key, value []byte)) error {
	if value != nil && len(key) > 0 && key[0] == effect.KeyPrefix {
		e, err := effect.DecodeEntry(value)
		if err != nil {
			return err
		}
		if e.Key != string(key[1:]) {
			return fmt.Errorf("%w: the entry of key %q is filed under %q", effect.ErrCorrupt, e.Key, key[1:])
		}
	}
	emit(key, value)
	return nil
}

// Run consumes intents and executes them until ctx is done. On shutdown the
// runners stop first, so that calls in progress are recorded through the
// still-running loop, then the loop stops. A store the worker opened
// (WorkerConfig.StateDir) is closed when Run returns.
func (w *Worker) Run(ctx context.Context) error {
	err := w.run(ctx)
	if w.ownStore {
		err = errors.Join(err, w.store.Close())
	}
	return err
}

func (w *Worker) run(ctx context.Context) error {
	runnersCtx, cancelRunners := context.WithCancel(context.Background())
	w.runCtx = runnersCtx
	loopCtx, stopLoop := context.WithCancel(context.Background())
	// Outcome reports go to the key's partition like the processor's
	// intents: hashed by key.
	rep, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(w.cfg.Brokers...)}, w.cfg.ClientOpts...),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))...)
	if err != nil {
		cancelRunners()
		stopLoop()
		return fmt.Errorf("sideeffects: report client: %w", err)
	}
	w.reportMu.Lock()
	w.reporter = rep
	w.reportMu.Unlock()
	defer func() {
		w.reportMu.Lock()
		w.reporter = nil
		w.reportMu.Unlock()
		flushCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = rep.Flush(flushCtx)
		cancel()
		rep.Close()
	}()
	errc := make(chan error, 1)
	go func() { errc <- w.loop.Run(loopCtx) }()
	w.cfg.Logger.Info("side-effect executor started", "group", w.cfg.Group(), "effectsTopic", w.cfg.EffectsTopic)
	// Runners are started (runnersWG.Add in Restored) only under mu and
	// while runnersCtx is live, and stopped under mu: every Add happens
	// before the Waits below.
	stopRunners := func() {
		w.mu.Lock()
		cancelRunners()
		w.mu.Unlock()
	}
	select {
	case err = <-errc:
		stopRunners()
		stopLoop()
		w.failRequests(errLoopStopped)
		w.runnersWG.Wait()
		return err
	case <-ctx.Done():
	}
	stopRunners()
	waited := make(chan struct{})
	go func() { w.runnersWG.Wait(); close(waited) }()
	select {
	case <-waited:
	case err = <-errc:
		w.failRequests(errLoopStopped)
		<-waited
		stopLoop()
		return err
	}
	stopLoop()
	err = <-errc
	w.failRequests(errLoopStopped)
	return err
}

// failRequests answers every queued request with err and refuses every
// later one: the loop that would have answered them is gone.
func (w *Worker) failRequests(err error) {
	w.mu.Lock()
	w.stopped = true
	reqs := w.requests
	w.requests = nil
	w.mu.Unlock()
	for _, r := range reqs {
		r.reply <- err
	}
	w.hook(hookRequestsFailed)
}

// Points of the request queue where a test hook runs (Worker.testHook).
const (
	hookEnqueue        = "enqueue"         // taskStore.Update, before it queues its request
	hookRequestsFailed = "requests failed" // failRequests answered the queue
)

func (w *Worker) hook(point string) {
	if w.testHook != nil {
		w.testHook(point)
	}
}

// changed counts a committed ledger transition and tells WorkerConfig.OnChange.
func (w *Worker) changed(e effect.Entry) {
	w.stats.add(e.Effect, e.Status.String())
	if w.cfg.OnChange != nil {
		w.cfg.OnChange(e)
	}
}
