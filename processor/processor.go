package processor

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/trace"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/core/acl"
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/inputformat"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/engine/guard"
)

// ErrFenced reports that another instance with the same transactional id took
// over; the process must stop (docs/design.md#fencing-is-fatal).
var ErrFenced = eos.ErrFenced

// Processor runs the exactly-once event pipeline. Create it with New and call
// Run once.
type Processor struct {
	cfg Config
	// store is the local state (Config.Store's, or opened in StateDir:
	// then ownStore, and Run closes it); now is the clock.
	store    *state.Store
	ownStore bool
	now      func() time.Time
	guards   []*guard.Guard
	loop     *eos.Loop[*taskState]
	stats    *Stats
	// decoders are the input topics' decoders, for the topics whose format
	// is not the envelope (inputs.go); read-only after New.
	decoders map[string]*inputformat.Decoder
	// runCtx is Run's context, for the Schema Registry requests a decoder
	// makes: set before the loop starts, read by its workers.
	runCtx context.Context
	// tracer makes the transaction spans (tracing.go); nil when
	// Session.TracerProvider is not set. curTrace is the open
	// transaction's span, set by Begin, read by the task batches.
	tracer   trace.Tracer
	curTrace *txnTrace
}

// taskState is the pipeline's state and work for one owned task (its
// eos.TaskHandler): the aggregates with held events and when their gap
// opened, and the task's dedup state. The gap index is derived from Pebble
// on every restore and updated only by commit hooks, so it is never ahead
// of Kafka. The loop makes it on assignment (pipeline.NewTask), calls it
// for the task's records and hands it to the loop-wide work (Loop.Tasks);
// the workers processing records only read what Restored and the commit
// hooks write.
type taskState struct {
	p    *Processor
	task *eos.Task
	// claims: the task is a partition of the ingress's claims topic, whose
	// records are claims (claim.go); it keeps no gap index and no dedup
	// state, only decided keys in the store.
	claims bool
	// decoder decodes the task's records into event envelopes; nil for a
	// topic of envelopes.
	decoder *inputformat.Decoder
	// gaps is the task's gap index: the aggregates with held events and
	// since when. Change it only through setGap and closeGap, which keep
	// sums (the per-projection summary publishGaps reports) up to date
	// without walking the index after every commit.
	// The value is the gap's start in unix milliseconds (the resolution
	// the aggregate record keeps): a pointer-free value, as a stream of
	// held events makes this index large and the collector scans it.
	gaps map[gapKey]int64
	sums map[string]*gapSum
	// due queues the gaps the last look through gaps found due and no
	// transaction has expired yet; expiry takes them expireChunk at a time.
	due []gapKey
	// inflight are the gaps expired in a transaction whose commit hooks
	// have not run yet: gaps still lists them (decision 004), but they are
	// not due again.
	inflight map[gapKey]struct{}
	// dedup is the task's dedup state (filter, recent ids, sweeper): made
	// by the first Restored (nil before), it survives a re-restore.
	dedup *dedup.Partition
	// open is the task's batch in the transaction being built and
	// openState its state (batchOf): made on the batch's first use,
	// dropped when its transaction ends. Only the goroutine processing
	// the task's batch uses them.
	open      *eos.Batch
	openState *batchState
}

// recentIDs sizes each task's front cache of committed event ids, which
// answers most duplicates without a store read (16 MiB per task).
const recentIDs = 1 << 18

// sweepChunk bounds the dedup entries one transaction examines for expiry.
const sweepChunk = 20000

// New validates cfg and returns a processor.
func New(cfg Config) (*Processor, error) {
	cfg.applyDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Processor{cfg: cfg, stats: newStats(), now: cfg.seams.Now, runCtx: context.Background()}
	decoders, err := cfg.decoders()
	if err != nil {
		return nil, err
	}
	p.decoders = decoders
	if cfg.TracerProvider != nil {
		p.tracer = cfg.TracerProvider.Tracer(tracerName)
	}
	if err := p.openStore(); err != nil {
		return nil, err
	}
	for _, pr := range cfg.Projections {
		p.guards = append(p.guards, &guard.Guard{P: pr, MaxHeld: cfg.MaxHeld, MaxRecordBytes: cfg.MaxRecordBytes})
	}
	var outputs []eos.TopicSpec
	for _, pr := range cfg.Projections {
		outputs = append(outputs, eos.TopicSpec{Name: pr.Topic, Compacted: true})
	}
	if cfg.Mode == Live && cfg.EffectsTopic != "" {
		outputs = append(outputs, eos.TopicSpec{Name: cfg.EffectsTopic})
	}
	if cfg.Mode == Live && cfg.ReceiptsTopic != "" {
		outputs = append(outputs, eos.TopicSpec{Name: cfg.ReceiptsTopic, Compacted: true})
	}
	ses := cfg.Session.eos(p.store, cfg.seams)
	lc := ses.LoopConfig(cfg.Group)
	lc.CreateInputs = !cfg.WaitForInputs
	lc.Inputs = cfg.Inputs
	if p.claims() {
		// The claims are decided on this loop, with their own changelog
		// (restores, fencing and state as every input's).
		lc.Inputs = append(slices.Clone(cfg.Inputs), cfg.ClaimsTopic)
		lc.InternalInputs = []eos.TopicSpec{{Name: cfg.ClaimsTopic, PartitionsOf: cfg.IngressTopic}}
		// A won claim's events are forwarded to the ingress's topic, one
		// of the inputs: Write on it, checked at start with the rest.
		lc.Needs = append(lc.Needs, acl.Topic(cfg.IngressTopic, kmsg.ACLOperationWrite, "forward the events of the ingress's won claims"))
	}
	lc.ChangelogOf = func(in string) string { return ChangelogTopic(cfg.Group, in) }
	lc.StartOffset = cfg.StartOffset
	lc.OutputTopics = outputs
	lc.Restore = restoreRecord(cfg.Dedup)
	lc.Stats = p.stats.loop
	// Tasks share nothing (decision 001): the guards and the dedup store are
	// stateless, per-task state is the task's taskState and per-transaction
	// state its batchState, one per task batch.
	lc.Parallel = true
	// Nothing outside the processor waits on its commit hooks (counts, the
	// gap index), so the Pebble write overlaps the next transaction.
	lc.AsyncCommit = true
	if cfg.Mode == Live {
		lc.StandbyReplicas = cfg.StandbyReplicas
		// A standby never sweeps: it deletes the expired segment entries
		// a segment's tombstone does not name itself.
		lc.StandbyTidy = newStandbyTidy(p.store, cfg.Dedup).tidy
	}
	p.loop = eos.New(lc, (*pipeline)(p))
	return p, nil
}

// Stats returns the processor's counters (safe to call concurrently).
func (p *Processor) Stats() *Stats { return p.stats }

// TransactionalID is the stable transactional id of this instance.
func (p *Processor) TransactionalID() string { return p.cfg.Group + "-" + p.cfg.InstanceID }

// Run consumes until ctx is done or a fatal error occurs. On ctx cancellation
// it finishes the open transaction (or aborts it), leaves the group and
// returns nil.
func (p *Processor) Run(ctx context.Context) error {
	p.cfg.Logger.Info("processor started", "name", p.cfg.Name, "transactionalId", p.TransactionalID(),
		"inputs", p.cfg.Inputs, "mode", p.cfg.Mode.String())
	p.runCtx = ctx
	err := p.loop.Run(ctx)
	if p.ownStore {
		err = errors.Join(err, p.store.Close())
	}
	if errors.Is(err, eos.ErrFenced) {
		p.cfg.Logger.Error("fenced: another instance uses this transactional id; stopping", "transactionalId", p.TransactionalID())
	}
	return err
}

// openStore sets the store the processor runs on: the one the seams give
// (the caller's), Config.Store's, or one it opens in Config.StateDir and
// closes when Run returns.
func (p *Processor) openStore() error {
	switch c := &p.cfg; {
	case c.seams.Store != nil:
		p.store = c.seams.Store
	case c.Store != nil:
		p.store = c.Store.st
	default:
		s, err := OpenStore(c.StateDir, 0)
		if err != nil {
			return err
		}
		p.store, p.ownStore = s.st, true
	}
	return nil
}

// pipeline is the processor as an eos.Handler.
type pipeline Processor

// NewTask returns the state of a newly assigned task; its Restored fills it.
func (h *pipeline) NewTask(t *eos.Task) *taskState {
	p := (*Processor)(h)
	ts := &taskState{p: p, task: t, claims: p.claims() && t.ID.Topic == p.cfg.ClaimsTopic, decoder: p.decoders[t.ID.Topic]}
	ts.resetGaps()
	return ts
}

// resetGaps empties the task's gap index.
func (ts *taskState) resetGaps() {
	ts.gaps, ts.sums, ts.inflight, ts.due = make(map[gapKey]int64), make(map[string]*gapSum), make(map[gapKey]struct{}), nil
}

// restoreRecord is the processor's eos.Config.Restore: every changelog
// record the guard or dedup reads is checked as it is restored, so that a
// corrupt one stops the restore there, named (changelog.CorruptError), and
// is never stored for a later event to stumble on
// (docs/contract.md#corrupt-changelog-records); dedup then expands its
// segments.
func restoreRecord(d *dedup.Store) func(key, value []byte, now time.Time, emit func(key, value []byte)) error {
	return func(key, value []byte, now time.Time, emit func(key, value []byte)) error {
		if err := guard.CheckRecord(key, value); err != nil {
			return err
		}
		return d.Restore(key, value, now, emit)
	}
}

// Restored rebuilds the task's gap index from the store and brings its
// dedup state up to date (the restore finished every transaction first,
// so no batch of the task is open). The loop calls it for several tasks at
// once (eos.Config.Parallel): it touches this task's state alone, and
// AfterRestore publishes the gap summaries once they are all done. A restore that wrote nothing since the
// last one (the verification after an assignment, mostly) leaves both as
// they are: nothing else writes an unverified task's state, so they still
// match the store, and rebuilding them scans every aggregate of the task
// (seconds at millions of aggregates, on a takeover's way to ready).
func (ts *taskState) Restored() error {
	p, t := ts.p, ts.task
	if ts.claims {
		return nil // decided keys are read from the store as claims come
	}
	if ts.dedup != nil && t.RestoredRecords == 0 {
		return nil
	}
	if ts.dedup != nil {
		// a sweep in progress survives a re-restore
		if err := ts.dedup.Restored(p.store.Scan, t.RestoredRecords > 0, recentIDs); err != nil {
			return err
		}
	} else {
		d, err := p.cfg.Dedup.NewPartition(p.store.Scan, t.Prefix, recentIDs, p.now())
		if err != nil {
			return err
		}
		ts.dedup = d
	}
	ts.resetGaps()
	// The gap index from the aggregate records: their held count covers
	// the held events under their own keys and the one a record carries
	// inline (which has no key to find it by).
	aggPrefix := append(append([]byte(nil), t.Prefix...), guard.KindAggregate)
	err := p.store.Scan(aggPrefix, func(k, v []byte) error {
		snap, err := guard.DecodeSnapshot(v)
		if err != nil || snap.HeldCount == 0 {
			return nil // inspect reports corrupt records; the guard never wrote one
		}
		proj, agg, err := guard.ParseAggregateKey(k[len(t.Prefix):])
		if err != nil {
			return nil
		}
		for _, g := range p.guards {
			if g.P.Name == proj {
				ts.setGap(gapKey{proj, agg}, snap.HeldSince)
			}
		}
		return nil
	})
	return err
}

// AfterRestore publishes the gap summaries of the tasks just restored
// (eos.AfterRestorer).
func (h *pipeline) AfterRestore() { (*Processor)(h).publishGaps() }

// Revoked drops the task's gaps from the published summary (the loop no
// longer lists the task).
func (ts *taskState) Revoked() { ts.p.publishGaps() }

func (h *pipeline) Due(now time.Time) bool { return (*Processor)(h).gapsDue(now) }

func (h *pipeline) Begin(b *eos.Batch) error {
	p := (*Processor)(h)
	p.beginSpan(b)
	b.OnCommitted(p.publishGaps)
	due := p.expiring(b.Now, expireChunk)
	if n := len(due); n > 0 {
		b.OnCommitted(func() { p.stats.addExpiries(n) })
	}
	for _, e := range due {
		if err := p.expire(b.For(e.ts.task), e); err != nil {
			return err
		}
	}
	if len(due) == expireChunk {
		// More may be due: the next transaction should not wait for
		// records first.
		p.loop.Wake()
	}
	var err error
	p.loop.Tasks(func(ts *taskState) {
		if ts.dedup == nil || err != nil {
			return // not restored yet
		}
		t := ts.task
		if ts.dedup.FilterFull() {
			// Rebuild larger from what is committed; marks staged since
			// are re-added as this transaction marks them anyway.
			// Through the txn: the previous transaction's marks may
			// still be on their way to Pebble.
			if err = ts.dedup.RebuildFilter(b.For(t).Txn.Scan); err != nil {
				return
			}
		}
		if ts.dedup.SweepDue(b.Now) { // most transactions: no task batch just for this
			_, err = ts.dedup.Sweep(b.For(t).Txn, b.Now, sweepChunk)
		}
	})
	return err
}

// Process handles one record of the task: an input record
// (Processor.process) or a claim (Processor.decideClaim).
func (ts *taskState) Process(b *eos.Batch, r *kgo.Record) error {
	if ts.p.tracer != nil {
		ts.traceRecord(b, r)
	}
	if ts.claims {
		return ts.p.decideClaim(b, ts, r)
	}
	return ts.p.process(b, ts, r)
}

// Stage writes the batch's dedup segment: its marks reach the changelog as
// one record.
func (ts *taskState) Stage(b *eos.Batch) {
	if ts.open == b && !ts.claims {
		ts.dedup.Stage(b.Txn, &ts.openState.marks)
	}
}
