package eos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/state"
)

// endTimeoutHeadroom is added to the transaction timeout for producing,
// flushing and ending one transaction.
const endTimeoutHeadroom = 10 * time.Second

// transact runs one Kafka transaction over the polled records and the
// handler's due work. It returns an error only when the loop must stop.
func (l *Loop) transact(sess *kgo.GroupTransactSession, fetches kgo.Fetches, now time.Time) error {
	start := time.Now()
	l.mu.Lock()
	revokes := l.revokes
	l.mu.Unlock()
	if err := sess.Begin(); err != nil {
		return fmt.Errorf("eos: begin transaction: %w", err)
	}
	// Records go to the producer as the handler makes them; the flush
	// below makes every produce error known before commit or abort.
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.TransactionTimeout+endTimeoutHeadroom)
	defer cancel()
	cl := sess.Client()
	offsets := newOffsetTracker(l.cfg.Inputs, l.cfg.ChangelogOf)
	var (
		perr     error
		pmu      sync.Mutex
		produced atomic.Int64
	)
	produce := func(r *kgo.Record) {
		produced.Add(1)
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				pmu.Lock()
				if perr == nil {
					perr = fmt.Errorf("produce to %s: %w", r.Topic, err)
				}
				pmu.Unlock()
				return
			}
			offsets.observe(r)
		})
	}
	var bases map[state.Task]*Batch
	if l.inflight != nil {
		bases = l.inflight.tx.byTask
	}
	b := newTxnBatches(l.cfg.Store, now, l.cfg.DeadLetterTopic, produce, bases)
	tx := b.tx
	tx.owned = make(map[*Task]bool, len(l.tasks))
	l.Tasks(func(t *Task) { tx.owned[t] = true })
	written := false // Kafka committed and Pebble written
	defer func() {
		if !written {
			tx.aborted()
		}
	}()
	err := l.h.Begin(b)
	if err == nil {
		err = l.processAll(b, fetches)
	}
	if err != nil {
		// A state read failed (Pebble error): abort and stop; nothing is lost.
		l.abort(sess)
		l.stats.addTxn("aborted", time.Since(start))
		return err
	}

	if err := cl.Flush(ctx); err != nil {
		l.abort(sess)
		return fmt.Errorf("eos: flush: %w", err)
	}
	if perr != nil {
		l.cfg.Logger.Warn("produce failed; aborting transaction", "err", perr)
		if isFatal(perr) {
			l.abort(sess)
			return fatalError("produce", perr)
		}
		if _, err := sess.End(ctx, kgo.TryAbort); err != nil {
			return l.endError(err)
		}
		l.stats.addTxn("aborted", time.Since(start))
		l.invalidate()
		if l.produceAborts++; l.produceAborts >= maxProduceAborts {
			return fmt.Errorf("eos: %d transactions in a row failed to produce; last error: %w", l.produceAborts, perr)
		}
		return nil
	}
	l.produceAborts = 0
	if h := l.cfg.Hooks; h != nil && h.AfterStage != nil {
		if err := h.AfterStage(); err != nil {
			return err
		}
	}
	committed, err := l.end(ctx, sess, tx, fetches.NumRecords() > 0, revokes)
	if err != nil {
		return l.endError(err)
	}
	if !committed {
		// (false, nil): a rebalance or an abortable offset-commit error. The
		// session rewinds to the committed offsets; drop the staged state.
		l.cfg.Logger.Info("transaction aborted; records will be processed again", "records", fetches.NumRecords())
		l.stats.addTxn("aborted", time.Since(start))
		l.invalidate()
		return nil
	}
	if h := l.cfg.Hooks; h != nil && h.AfterCommit != nil {
		if err := h.AfterCommit(); err != nil {
			return err
		}
	}
	// The previous transaction's write must land first: Pebble applies
	// transactions in order, and this one's txns stop reading through it.
	if err := l.settle(); err != nil {
		return err
	}
	tx.bases = nil // the previous transaction is in Pebble now
	for _, c := range tx.children {
		c.Txn.Detach()
		if next, ok := offsets.next[c.task.ID]; ok {
			c.Txn.SetChangelogOffset(c.task.ID, next)
		}
	}
	written = true // from here on, the abort hooks are the write's to run
	f := &inflight{done: make(chan struct{}), tx: tx, start: start, records: fetches.NumRecords(), produced: produced.Load()}
	if !l.cfg.AsyncCommit {
		f.write(l.cfg.Store)
		return l.finish(f)
	}
	l.writers.Add(1)
	go func() {
		defer l.writers.Done()
		f.write(l.cfg.Store)
		l.interruptPoll() // an idle loop settles it without waiting for records
	}()
	l.inflight = f
	return nil
}

// errStateCommit: Kafka committed a transaction that Pebble did not get.
// Never masked as a clean stop: the restart must restore.
var errStateCommit = errors.New("eos: state commit after Kafka commit")

// inflight is a committed transaction's Pebble write: its task batches' txns.
type inflight struct {
	done     chan struct{}
	err      error
	tx       *txnBatches
	start    time.Time
	took     time.Duration
	records  int
	produced int64
}

// write runs on its own goroutine while the next transaction reads through
// the txns: it must not change them (state.Store.WriteAll only reads).
func (f *inflight) write(st *state.Store) {
	txns := make([]*state.Txn, len(f.tx.children))
	for i, c := range f.tx.children {
		txns[i] = c.Txn
	}
	f.err = st.WriteAll(txns)
	f.took = time.Since(f.start)
	close(f.done)
}

// settle waits for the in-flight Pebble write, if any, and finishes it.
func (l *Loop) settle() error {
	f := l.inflight
	if f == nil {
		return nil
	}
	l.inflight = nil
	<-f.done
	return l.finish(f)
}

// finish runs a written transaction's hooks, or reports its failed write.
func (l *Loop) finish(f *inflight) error {
	if f.err != nil {
		// Kafka has the transaction; Pebble does not (or not all of it).
		// Stop: on restart the changelog restores what is missing
		// (docs/design.md#changelog-closes-gap).
		f.tx.aborted()
		return fmt.Errorf("%w: %w", errStateCommit, f.err)
	}
	for _, c := range f.tx.children {
		c.Txn.Finish()
	}
	f.tx.committed()
	l.stats.addTxn("committed", f.took)
	if l.cfg.Logger.Enabled(context.Background(), slog.LevelDebug) {
		l.cfg.Logger.Debug("transaction committed", "records", f.records, "produced", f.produced, "took", f.took)
	}
	return nil
}

// taskWork is one task's records in a transaction.
type taskWork struct {
	b    *Batch
	recs []*kgo.Record
}

// processAll hands every polled record to the handler, task by task, then
// produces each task's changelog records. With Config.Parallel, tasks are
// processed concurrently (each task's records in order, on one goroutine):
// tasks share no state (decision 001), and each has its own Batch.
func (l *Loop) processAll(b *Batch, fetches kgo.Fetches) error {
	var work []taskWork
	at := map[state.Task]int{}
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		id := state.Task{Topic: fp.Topic, Partition: fp.Partition}
		t := l.tasks[id]
		if t == nil || len(fp.Records) == 0 {
			// Nothing to process, or revoked since the poll: then the
			// session aborts this transaction and its records come
			// back to the new owner.
			return
		}
		i, ok := at[id]
		if !ok {
			i = len(work)
			at[id] = i
			work = append(work, taskWork{b: b.For(t)})
		}
		work[i].recs = append(work[i].recs, fp.Records...)
	})
	// Task batches that Begin used but no record reaches.
	var idle []*Batch
	for _, c := range b.tx.children {
		if _, ok := at[c.task.ID]; !ok {
			idle = append(idle, c)
		}
	}
	// Workers take the tasks in turn; the first error stops them all.
	var (
		next atomic.Int64
		stop atomic.Bool
		emu  sync.Mutex
		ferr error
	)
	run := func(w taskWork) error {
		for _, r := range w.recs {
			if stop.Load() {
				return nil
			}
			if err := l.h.Process(w.b, w.b.task, r); err != nil {
				return err
			}
		}
		return l.stage(w.b)
	}
	worker := func() {
		for {
			i := int(next.Add(1) - 1)
			if i >= len(work) || stop.Load() {
				return
			}
			if err := run(work[i]); err != nil {
				stop.Store(true)
				emu.Lock()
				if ferr == nil {
					ferr = err
				}
				emu.Unlock()
				return
			}
		}
	}
	workers := 1
	if l.cfg.Parallel {
		workers = min(len(work), runtime.GOMAXPROCS(0))
	}
	if workers <= 1 {
		worker() // on the loop's goroutine
	} else {
		var wg sync.WaitGroup
		for range workers {
			wg.Go(worker)
		}
		wg.Wait()
	}
	if ferr != nil {
		return ferr
	}
	for _, c := range idle {
		if err := l.stage(c); err != nil {
			return err
		}
	}
	return nil
}

// end commits the transaction if it can: the session's End, which commits
// the consumed records' offsets and aborts on any rebalance.
//
// Every transaction that changes a task's state is fenced by the group
// generation, also when it consumed nothing from that task (ledger
// transitions, gap expiry, sweeps): its TxnOffsetCommit carries the task's
// partition at its committed offset again (fence). A member the group has
// dropped – a zombie that has not noticed yet – gets ILLEGAL_GENERATION or
// UNKNOWN_MEMBER_ID there and the transaction aborts; and a new owner's
// offset fetch (require_stable) waits for the transaction to resolve before
// it restores.
//
// A transaction that changed no state and consumed nothing is ended
// directly: the session's End, with no offsets to commit, would hold its lock
// for 500 ms after the commit (its pre-KIP-447 safety delay). The rebalance
// guard is kept: any revoke since Begin aborts.
func (l *Loop) end(ctx context.Context, sess *kgo.GroupTransactSession, tx *txnBatches, consumed bool, revokesAtBegin int) (bool, error) {
	fence, ok := l.fenceOffsets(tx)
	if !ok {
		l.abort(sess)
		return false, nil
	}
	if !consumed && len(fence) == 0 {
		l.mu.Lock()
		revoked := l.revokes != revokesAtBegin
		l.mu.Unlock()
		if err := sess.Client().EndTransaction(ctx, kgo.TransactionEndTry(!revoked)); err != nil {
			return false, err
		}
		return !revoked, nil
	}
	l.needReset = false // End clears the session's revoked flag
	if len(fence) > 0 {
		ctx = kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
			addFence(req, fence)
			return nil
		})
	}
	return sess.End(ctx, kgo.TryCommit)
}

// fenceOffsets returns the committed offsets of the tasks whose state the
// transaction changes without consuming their records. ok is false when a
// changed task cannot be fenced – it is not owned and verified, or the
// group holds no offset for it – and the transaction must not commit.
func (l *Loop) fenceOffsets(tx *txnBatches) (map[state.Task]kgo.EpochOffset, bool) {
	if len(tx.children) == 0 {
		return nil, true
	}
	cl := l.sess.Client()
	uncommitted, committed := cl.UncommittedOffsets(), cl.CommittedOffsets()
	var fence map[state.Task]kgo.EpochOffset
	for _, c := range tx.children {
		id := c.task.ID
		if c.Txn.Len() == 0 {
			continue // the task's state does not change
		}
		if _, ok := uncommitted[id.Topic][id.Partition]; ok {
			continue // consumed in this transaction: End commits it
		}
		eo, ok := committed[id.Topic][id.Partition]
		if !ok || eo.Offset < 0 || !tx.owned[c.task] {
			l.cfg.Logger.Error("a transaction changes a partition it cannot fence; aborting it",
				"task", id.String(), "owned", tx.owned[c.task], "committedOffset", ok)
			return nil, false
		}
		if fence == nil {
			fence = make(map[state.Task]kgo.EpochOffset)
		}
		fence[id] = eo
	}
	return fence, true
}

// addFence adds the fence offsets to a TxnOffsetCommit request, leaving the
// partitions it already commits alone.
func addFence(req *kmsg.TxnOffsetCommitRequest, fence map[state.Task]kgo.EpochOffset) {
	has := make(map[state.Task]bool)
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			has[state.Task{Topic: t.Topic, Partition: p.Partition}] = true
		}
	}
	for id, eo := range fence {
		if has[id] {
			continue
		}
		i := slices.IndexFunc(req.Topics, func(t kmsg.TxnOffsetCommitRequestTopic) bool { return t.Topic == id.Topic })
		if i < 0 {
			rt := kmsg.NewTxnOffsetCommitRequestTopic()
			rt.Topic = id.Topic
			req.Topics = append(req.Topics, rt)
			i = len(req.Topics) - 1
		}
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset, rp.LeaderEpoch = id.Partition, eo.Offset, eo.Epoch
		rp.Metadata = &req.MemberID
		req.Topics[i].Partitions = append(req.Topics[i].Partitions, rp)
	}
}

// abort ends the open transaction with an abort, best effort.
func (l *Loop) abort(sess *kgo.GroupTransactSession) {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.TransactionTimeout)
	defer cancel()
	if _, err := sess.End(ctx, kgo.TryAbort); err != nil {
		l.cfg.Logger.Warn("abort failed", "err", err)
	}
}

// endError classifies an error from End. None is retryable (franz-go's
// contract): the outcome may be unknown, so local state can no longer be
// trusted to match Kafka. The loop stops; a restart restores from the
// changelog.
func (l *Loop) endError(err error) error {
	l.stats.addTxn("failed", 0)
	if isFatal(err) {
		return fatalError("end transaction", err)
	}
	return fmt.Errorf("eos: end transaction: %w", err)
}

// invalidate forces every task to be restored again before its next records:
// after an abort nothing in Pebble changed, but the handler's in-memory
// indexes are rebuilt from Pebble on restore, so they cannot carry anything
// from the aborted transaction.
func (l *Loop) invalidate() {
	for _, t := range l.tasks {
		t.verified = false
	}
	l.publishReadiness()
}

// stage ends a task batch's processing: the handler's Stage, then its
// changelog records.
func (l *Loop) stage(b *Batch) error {
	err := stageChangelog(l.h, l.cfg.ChangelogOf(b.task.ID.Topic), b)
	b.task.stagedHint = b.Txn.Len()
	return err
}

// stageChangelog runs h's Stage (if it is a Stager) on a task batch, then
// produces the batch's staged state to topic as changelog records, one per
// key (local writes excepted).
func stageChangelog(h Handler, topic string, b *Batch) error {
	if s, ok := h.(Stager); ok {
		s.Stage(b)
	}
	n := len(b.task.Prefix)
	// Records are allocated in blocks, not one by one (Len overcounts:
	// it includes local writes).
	var recs []kgo.Record
	var err error
	b.Txn.Each(func(key string, val []byte) {
		if err != nil {
			return
		}
		if len(key) < n || key[:n] != string(b.task.Prefix) {
			// A key of another task would restore into the wrong
			// partition's state: a handler bug, stop before it lands.
			err = fmt.Errorf("eos: task %s staged a key outside its prefix: %q", b.task.ID, key)
			return
		}
		// The staged key's bytes, not a copy: strings are immutable and
		// the producer only reads the key.
		k := unsafe.Slice(unsafe.StringData(key[n:]), len(key)-n)
		if len(recs) == cap(recs) {
			recs = make([]kgo.Record, 0, min(b.Txn.Len(), 512))
		}
		recs = append(recs, kgo.Record{Topic: topic, Partition: b.task.ID.Partition, Key: k, Value: val})
		b.tx.produce(&recs[len(recs)-1])
	})
	return err
}

// offsetTracker records, per task, the offset after the last changelog record
// this transaction wrote.
type offsetTracker struct {
	inputOf map[string]string // changelog topic → input topic
	mu      sync.Mutex
	next    map[state.Task]int64
}

func newOffsetTracker(inputs []string, changelogOf func(string) string) *offsetTracker {
	o := &offsetTracker{inputOf: make(map[string]string, len(inputs)), next: make(map[state.Task]int64)}
	for _, in := range inputs {
		o.inputOf[changelogOf(in)] = in
	}
	return o
}

func (o *offsetTracker) observe(r *kgo.Record) {
	in, ok := o.inputOf[r.Topic]
	if !ok {
		return
	}
	id := state.Task{Topic: in, Partition: r.Partition}
	o.mu.Lock()
	if r.Offset+1 > o.next[id] {
		o.next[id] = r.Offset + 1
	}
	o.mu.Unlock()
}
