package sideeffects

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/eos"
	"github.com/projector-dev/projector/internal/state"
)

// HeaderCommand marks a record on the effects topic that is an operator
// command rather than an intent; its value is a Command.
const HeaderCommand = "projector-command"

// Command is an instruction for one key, sent through the effects topic so
// that it is applied by the partition's owner inside its own transaction,
// whether or not the executor is running when it is sent. Op "resolve" is
// an operator's (As, Note); op "outcome" is an executor's report of a call
// it made but could no longer record because its partition was revoked
// (Attempt, Result, As, Next): the new owner records it (Ledger.Settle)
// instead of calling the key again once the attempt's deadline passed.
type Command struct {
	Op      string    `json:"op"` // "resolve" | "outcome"
	As      string    `json:"as"` // succeeded | failed (| pending | unknown for an outcome)
	Note    string    `json:"note,omitempty"`
	Attempt int       `json:"attempt,omitempty"`
	Result  *Attempt  `json:"result,omitempty"`
	Next    time.Time `json:"next,omitzero"`
}

// Command ops.
const (
	OpResolve = "resolve"
	OpOutcome = "outcome"
)

// ErrRevoked is returned to a Runner whose partition was revoked.
var ErrRevoked = errors.New("sideeffects: partition revoked")

// WorkerConfig configures the executor worker.
type WorkerConfig struct {
	Name, InstanceID string
	Brokers          []string
	ClientOpts       []kgo.Opt
	EffectsTopic     string
	DeadLetterTopic  string
	Store            *state.Store
	Effects          map[string]Effect
	// Workers bounds concurrent calls per owned partition.
	Workers          int
	MaxRecordsPerTxn int
	// MaxRecordBytes is kafka.maxRecordBytes: the producer's batch limit
	// and created topics' max.message.bytes are raised above it (0: the
	// client's defaults).
	MaxRecordBytes     int
	TransactionTimeout time.Duration
	SessionTimeout     time.Duration
	Partitions         int32
	Logger             *slog.Logger
	Now                func() time.Time
	// OnChange is called after every committed ledger transition.
	OnChange func(Entry)
	Hooks    *eos.Hooks
}

// Group is the executor's consumer group.
func (c *WorkerConfig) Group() string { return c.Name + "-executor" }

// ChangelogTopic is the ledger's changelog for the effects topic.
func ChangelogTopic(name, effectsTopic string) string {
	return name + "-executor." + effectsTopic + ".changelog"
}

// Worker is the side-effect executor: it consumes intents from the effects
// topic into the keyed ledger (inside exactly-once transactions, with the
// ledger's own changelog) and runs one Runner per owned partition. Every
// ledger transition a Runner makes — in-flight before the call above all —
// is committed through the same loop before the Runner goes on.
type Worker struct {
	cfg  WorkerConfig
	loop *eos.Loop

	mu       sync.Mutex
	requests []*request

	runnersWG sync.WaitGroup
	runCtx    context.Context
	stats     *WorkerStats
	// calls is shared by all the worker's Runners: a partition's new Runner
	// must see the calls its revoked predecessor still has in flight.
	calls *Calls
	// reporter produces outcome reports (report) outside the loop's
	// transactions; it lives while Run does.
	reportMu sync.Mutex
	reporter *kgo.Client
}

// WorkerStats counts what the worker committed.
type WorkerStats struct {
	*eos.Stats
	mu      sync.Mutex
	byES    map[[2]string]int64 // (effect, status)
	runners map[*Runner]bool
}

// Pending is the side-effect backlog of the owned partitions: keys waiting
// for an attempt (including retries) or being executed.
func (s *WorkerStats) Pending() int64 {
	s.mu.Lock()
	rs := make([]*Runner, 0, len(s.runners))
	for r := range s.runners {
		rs = append(rs, r)
	}
	s.mu.Unlock()
	var n int64
	for _, r := range rs {
		n += int64(r.Backlog())
	}
	return n
}

func (s *WorkerStats) track(r *Runner, on bool) {
	s.mu.Lock()
	if on {
		s.runners[r] = true
	} else {
		delete(s.runners, r)
	}
	s.mu.Unlock()
}

// Effects returns the count of committed transitions into status.
func (s *WorkerStats) Effects(effect, status string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byES[[2]string{effect, status}]
}

func (s *WorkerStats) add(effect, status string) {
	s.mu.Lock()
	s.byES[[2]string{effect, status}]++
	s.mu.Unlock()
}

// request is one Runner Update waiting for the loop.
type request struct {
	task  *eos.Task
	fn    func(*Ledger) error
	reply chan error
	// blocked: it writes to a partition the client holds no offset for
	// yet; Due ignores it until a transaction owns the partition.
	blocked bool
}

type workerTask struct {
	runner *Runner
	cancel context.CancelFunc
	done   chan struct{}
	ledger []byte // ledger prefix (the task prefix)
	// revoked is set when the partition is revoked: from then on this
	// runner's updates are refused, even those it makes while winding down,
	// so that it can never race the partition's next runner (here or on
	// another instance) over the same ledger entries.
	revoked atomic.Bool
}

// NewWorker validates cfg and returns a worker; call Run once.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if cfg.Name == "" || cfg.InstanceID == "" || len(cfg.Brokers) == 0 || cfg.EffectsTopic == "" || cfg.Store == nil {
		return nil, errors.New("sideeffects: worker needs Name, InstanceID, Brokers, EffectsTopic and Store")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxRecordsPerTxn <= 0 {
		cfg.MaxRecordsPerTxn = 1000
	}
	if cfg.TransactionTimeout <= 0 {
		cfg.TransactionTimeout = 40 * time.Second
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 45 * time.Second
	}
	w := &Worker{cfg: cfg, stats: &WorkerStats{Stats: eos.NewStats(), byES: map[[2]string]int64{}, runners: map[*Runner]bool{}}}
	w.calls = NewCalls()
	w.loop = eos.New(eos.Config{
		Group: cfg.Group(), TransactionalID: cfg.Group() + "-" + cfg.InstanceID, InstanceID: cfg.InstanceID,
		Brokers: cfg.Brokers, ClientOpts: cfg.ClientOpts,
		// The effects topic is projector's own: whoever starts first
		// creates it.
		CreateInputs:    true,
		Inputs:          []string{cfg.EffectsTopic},
		ChangelogOf:     func(in string) string { return ChangelogTopic(cfg.Name, in) },
		DeadLetterTopic: cfg.DeadLetterTopic, Partitions: cfg.Partitions,
		Store: cfg.Store, MaxRecordsPerTxn: cfg.MaxRecordsPerTxn, MaxRecordBytes: cfg.MaxRecordBytes,
		TransactionTimeout: cfg.TransactionTimeout, SessionTimeout: cfg.SessionTimeout,
		Logger: cfg.Logger, Now: cfg.Now, Hooks: cfg.Hooks, Stats: w.stats.Stats,
	}, (*workerHandler)(w))
	return w, nil
}

// Stats returns the worker's counters.
func (w *Worker) Stats() *WorkerStats { return w.stats }

// Run consumes intents and executes them until ctx is done. On shutdown the
// runners stop first, so that calls in progress are recorded through the
// still-running loop, then the loop stops.
func (w *Worker) Run(ctx context.Context) error {
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
		w.failRequests(errors.New("sideeffects: executor loop stopped"))
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
		w.failRequests(errors.New("sideeffects: executor loop stopped"))
		<-waited
		stopLoop()
		return err
	}
	stopLoop()
	err = <-errc
	w.failRequests(errors.New("sideeffects: executor loop stopped"))
	return err
}

func (w *Worker) failRequests(err error) {
	w.mu.Lock()
	reqs := w.requests
	w.requests = nil
	w.mu.Unlock()
	for _, r := range reqs {
		r.reply <- err
	}
}

// workerHandler is the worker as an eos.Handler.
type workerHandler Worker

func (h *workerHandler) Restored(t *eos.Task) error {
	w := (*Worker)(h)
	if t.Data != nil {
		return nil // restored again after an abort: the runner keeps going
	}
	if !t.Verified() {
		// The first restore on assignment: a previous owner's transaction
		// may still be open (it may have started a key and called its
		// receiver). The Runner starts at verification, when that has
		// resolved and the ledger shows it.
		return nil
	}
	ctx, cancel := context.WithCancel(w.runCtx)
	wt := &workerTask{cancel: cancel, done: make(chan struct{}), ledger: t.Prefix}
	r, err := NewRunner(RunnerConfig{
		Store: &taskStore{w: w, task: t}, Effects: w.cfg.Effects, Workers: w.cfg.Workers,
		Now: w.cfg.Now, Logger: w.cfg.Logger.With("partition", t.ID.Partition),
		Calls: w.calls, Scope: string(t.Prefix), Report: w.report, OnChange: w.changed,
	})
	if err != nil {
		cancel()
		return err
	}
	w.mu.Lock()
	if ctx.Err() != nil { // the worker is stopping: start no Runner
		w.mu.Unlock()
		cancel()
		return nil
	}
	w.runnersWG.Add(1)
	w.mu.Unlock()
	wt.runner = r
	t.Data = wt
	w.stats.track(r, true)
	go func() {
		defer w.runnersWG.Done()
		defer w.stats.track(r, false)
		defer close(wt.done)
		if err := r.Run(ctx); err != nil && !errors.Is(err, ErrRevoked) && ctx.Err() == nil {
			// Its partition's keys wait until the partition is assigned
			// again (a restart or a rebalance): say so loudly.
			w.cfg.Logger.Error("side-effect runner stopped; its partition executes nothing until reassigned", "partition", t.ID.Partition, "err", err)
		}
	}()
	return nil
}

func (h *workerHandler) Revoked(t *eos.Task) {
	if wt, ok := t.Data.(*workerTask); ok {
		wt.revoked.Store(true)
		wt.cancel()
	}
	w := (*Worker)(h)
	// Updates still queued for this task can no longer be committed by us.
	w.mu.Lock()
	keep := w.requests[:0]
	var drop []*request
	for _, r := range w.requests {
		if r.task == t {
			drop = append(drop, r)
		} else {
			keep = append(keep, r)
		}
	}
	w.requests = keep
	w.mu.Unlock()
	for _, r := range drop {
		r.reply <- ErrRevoked
	}
}

// Due reports queued updates that Begin can act on: those of verified tasks,
// except the ones already found to need a partition the group holds no
// offset for (they wait for the task's first records).
func (h *workerHandler) Due(time.Time) bool {
	w := (*Worker)(h)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.requests {
		if r.task.Verified() && !r.blocked {
			return true
		}
	}
	return false
}

// Begin applies the Runners' queued ledger updates, each in its own overlay
// so that a failing one leaves nothing behind; their callers are answered
// once the transaction commits. Only updates of tasks the transaction owns
// (owned and verified at its start) are applied: an update of a revoked or
// lost partition is refused, one of a partition being restored again waits.
func (h *workerHandler) Begin(b *eos.Batch) error {
	w := (*Worker)(h)
	w.mu.Lock()
	reqs := w.requests
	w.requests = nil
	w.mu.Unlock()
	var ok, wait []*request
	for _, r := range reqs {
		wt, _ := r.task.Data.(*workerTask)
		switch {
		case wt != nil && wt.revoked.Load():
			r.reply <- ErrRevoked
			continue
		case !b.Owns(r.task) && !r.task.Verified():
			wait = append(wait, r) // being restored again
			continue
		case !b.Owns(r.task):
			// Verified, but the client holds no offset for the
			// partition: never committed (a new partition), or lost
			// and about to be revoked (Loop.dropLost). A write here
			// could not be fenced. An update that writes nothing
			// (Recover of a ledger with no call in flight) is done;
			// one that writes waits for an owned transaction.
			ov := newOverlay(readOnly{w.cfg.Store})
			if err := r.fn(NewLedger(ov, r.task.Prefix)); err != nil {
				r.reply <- err
			} else if len(ov.writes) == 0 {
				r.reply <- nil
			} else {
				r.blocked = true
				wait = append(wait, r)
			}
			continue
		}
		r.blocked = false
		ov := newOverlay(b.For(r.task).Txn)
		if err := r.fn(NewLedger(ov, r.task.Prefix)); err != nil {
			r.reply <- err
			continue
		}
		ov.merge()
		ok = append(ok, r)
	}
	if len(wait) > 0 {
		w.mu.Lock()
		w.requests = append(wait, w.requests...)
		w.mu.Unlock()
	}
	if len(ok) > 0 {
		b.OnCommit(func() {
			for _, r := range ok {
				r.reply <- nil
			}
		})
		b.OnAbort(func() {
			// The transaction did not commit (a rebalance, an abortable
			// error): run the updates again in the next one, against the
			// state as committed. Each update re-reads the ledger, so a
			// second run decides afresh. Updates of a partition we no
			// longer own are answered by Revoked.
			w.mu.Lock()
			w.requests = append(ok, w.requests...)
			w.mu.Unlock()
			w.loop.Wake()
		})
	}
	return nil
}

// Process offers one intent (or applies one operator command).
func (h *workerHandler) Process(b *eos.Batch, t *eos.Task, r *kgo.Record) error {
	w := (*Worker)(h)
	l := NewLedger(b.Txn, t.Prefix)
	wt, _ := t.Data.(*workerTask)
	for _, hd := range r.Headers {
		if hd.Key == HeaderCommand {
			return w.command(b, t, r)
		}
	}
	in, err := ParseIntent(r.Value)
	if err != nil {
		b.DeadLetter(t.ID, r.Offset, r.Key, r.Value, "invalid:value", err.Error())
		return nil
	}
	e, dup, err := l.Offer(in, b.Now)
	if err != nil {
		var te *TransitionError
		if errors.As(err, &te) || errors.Is(err, ErrBadIntent) {
			b.DeadLetter(t.ID, r.Offset, r.Key, r.Value, "invalid:value", err.Error())
			return nil
		}
		return err
	}
	if dup {
		b.OnCommit(func() { w.stats.add(in.Effect, "duplicate") })
		return nil
	}
	b.OnCommit(func() {
		w.stats.add(e.Effect, "pending")
		if wt != nil {
			wt.runner.Enqueue(e.Key)
		}
	})
	return nil
}

func (w *Worker) command(b *eos.Batch, t *eos.Task, r *kgo.Record) error {
	var c Command
	if err := json.Unmarshal(r.Value, &c); err != nil || (c.Op != OpResolve && c.Op != OpOutcome) {
		b.DeadLetter(t.ID, r.Offset, r.Key, r.Value, "invalid:value", fmt.Sprintf("bad command: %s", eos.Truncate(r.Value, 256)))
		return nil
	}
	as, err := ParseStatus(c.As)
	if err != nil {
		b.DeadLetter(t.ID, r.Offset, r.Key, r.Value, "invalid:value", err.Error())
		return nil
	}
	if c.Op == OpOutcome {
		return w.settleReport(b, t, r, c, as)
	}
	ov := newOverlay(b.Txn)
	e, err := NewLedger(ov, t.Prefix).Resolve(string(r.Key), as, c.Note, b.Now)
	if err != nil {
		// Not unknown (or no such key): the command is refused, recorded.
		b.DeadLetter(t.ID, r.Offset, r.Key, r.Value, "invalid:value", "resolve refused: "+err.Error())
		return nil
	}
	ov.merge()
	b.OnCommit(func() {
		w.stats.add(e.Effect, "resolved")
		w.cfg.Logger.Info("side effect resolved by operator", "key", e.Key, "as", c.As, "note", c.Note)
	})
	return nil
}

// changed counts a committed ledger transition and tells WorkerConfig.OnChange.
func (w *Worker) changed(e Entry) {
	w.stats.add(e.Effect, e.Status.String())
	if w.cfg.OnChange != nil {
		w.cfg.OnChange(e)
	}
}

// settleReport records the outcome another Runner reported for attempt
// c.Attempt of a key (see Command). A report the ledger has moved past – the
// outcome was recorded already, or the key was tried again – changes
// nothing: the attempt it describes is no longer the open one.
func (w *Worker) settleReport(b *eos.Batch, t *eos.Task, r *kgo.Record, c Command, as Status) error {
	if c.Result == nil || c.Attempt < 1 {
		b.DeadLetter(t.ID, r.Offset, r.Key, r.Value, "invalid:value", "outcome report without attempt or result")
		return nil
	}
	ov := newOverlay(b.Txn)
	e, err := NewLedger(ov, t.Prefix).Settle(string(r.Key), c.Attempt, *c.Result, as, c.Next)
	switch {
	case errors.Is(err, ErrIllegalTransition) || errors.Is(err, ErrNotFound):
		w.cfg.Logger.Debug("outcome report no longer applies", "key", string(r.Key), "attempt", c.Attempt, "err", err)
		return nil
	case err != nil:
		return err
	}
	ov.merge()
	wt, _ := t.Data.(*workerTask)
	b.OnCommit(func() {
		w.changed(e)
		w.cfg.Logger.Info("side effect outcome recorded from the previous owner's report", "key", e.Key, "status", e.Status, "attempt", c.Attempt)
		if wt != nil {
			wt.runner.Enqueue(e.Key) // a retry it scheduled re-reads the entry
		}
	})
	return nil
}

// report sends the outcome of attempt n of key, which a revoked Runner
// could not record, to the key's partition (see Command). Best effort: if it
// is lost, the new owner retries the key after the attempt's deadline, with
// the same idempotency key.
func (w *Worker) report(key string, n int, a Attempt, to Status, next time.Time) {
	w.reportMu.Lock()
	cl := w.reporter
	w.reportMu.Unlock()
	if cl == nil {
		return
	}
	v, err := json.Marshal(Command{Op: OpOutcome, As: to.String(), Attempt: n, Result: &a, Next: next})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	cl.Produce(ctx, &kgo.Record{Topic: w.cfg.EffectsTopic, Key: []byte(key), Value: v,
		Headers: []kgo.RecordHeader{{Key: HeaderCommand, Value: []byte(OpOutcome)}}},
		func(_ *kgo.Record, err error) {
			cancel()
			if err != nil {
				w.cfg.Logger.Warn("could not report a side effect's outcome to the partition's new owner; it retries the key after the attempt's deadline",
					"key", key, "attempt", n, "err", err)
			}
		})
}

// taskStore is a Runner's Store: updates go through the worker's loop.
type taskStore struct {
	w    *Worker
	task *eos.Task
}

func (s *taskStore) Update(fn func(*Ledger) error) error {
	if wt, ok := s.task.Data.(*workerTask); ok && wt.revoked.Load() {
		return ErrRevoked
	}
	r := &request{task: s.task, fn: fn, reply: make(chan error, 1)}
	s.w.mu.Lock()
	s.w.requests = append(s.w.requests, r)
	s.w.mu.Unlock()
	s.w.loop.Wake()
	return <-r.reply
}

func (s *taskStore) View(fn func(*Ledger) error) error {
	return fn(NewLedger(readOnly{s.w.cfg.Store}, s.task.Prefix))
}

// readOnly reads committed state straight from Pebble.
type readOnly struct{ s *state.Store }

func (r readOnly) Get(k []byte) ([]byte, bool, error) { return r.s.Get(k) }
func (readOnly) Set(_, _ []byte)                      { panic("sideeffects: View must not write") }
func (r readOnly) Scan(p []byte, fn func(k, v []byte) error) error {
	return r.s.Scan(p, fn)
}
