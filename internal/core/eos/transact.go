package eos

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/state"
)

// endTimeoutHeadroom is added to the transaction timeout for producing,
// flushing and ending one transaction.
const endTimeoutHeadroom = 10 * time.Second

// transact runs one Kafka transaction over the polled records and the
// handler's due work. It returns an error only when the loop must stop.
func (l *Loop[T]) transact(sess *kgo.GroupTransactSession, fetches kgo.Fetches, now time.Time) error {
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
	p := newTxnProducer(ctx, sess.Client(), newOffsetTracker(l.cfg.Inputs, l.cfg.ChangelogOf))
	b := l.newTransaction(now, p.produce)
	tx := b.tx
	written := false // Kafka committed and Pebble written
	defer func() {
		if !written {
			tx.aborted()
		}
	}()
	err := l.h.Begin(b)
	ph := phases{last: start}
	if err == nil {
		err = l.processAll(b, fetches)
	}
	ph.mark(&ph.process)
	if err != nil {
		// A state read failed (Pebble error): abort and stop; nothing is
		// lost. Or a record must wait (HoldError): abort, and Run tries
		// again after a backoff; nothing of the transaction was written,
		// but the handler's in-memory indexes may have seen it.
		l.abort(sess)
		l.stats.addTxn("aborted", time.Since(start))
		if _, ok := asHold(err); ok {
			l.invalidate()
		}
		return err
	}

	if err := sess.Client().Flush(ctx); err != nil {
		l.abort(sess)
		return fmt.Errorf("eos: flush: %w", err)
	}
	if perr := p.failure(); perr != nil {
		return l.produceFailed(ctx, sess, perr, start)
	}
	ph.mark(&ph.flush)
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
	ph.mark(&ph.commit)
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
	ph.mark(&ph.settle)
	written = true // from here on, the abort hooks are the write's to run
	l.unhold()
	return l.writeState(tx, p, start, ph, fetches.NumRecords())
}

// newTransaction returns the top batch of a new transaction. While the
// previous transaction's Pebble write is in flight (AsyncCommit), task txns
// read through its batches; the tasks owned and verified now are the only
// ones the transaction may change outside Process (Batch.Owns).
func (l *Loop[T]) newTransaction(now time.Time, produce func(*kgo.Record)) *Batch {
	var bases map[state.Task]*Batch
	if l.inflight != nil {
		bases = l.inflight.tx.byTask
	}
	b := newTxnBatches(l.cfg.Store, now, l.cfg.DeadLetterTopic, produce, bases)
	b.tx.owned = make(map[*Task]bool, len(l.tasks))
	l.eachOwned(func(t ownedTask[T]) { b.tx.owned[t.Task] = true })
	return b
}

// txnProducer hands a transaction's records to the client as the handler
// makes them. It counts them, notes the changelog offsets the broker
// assigns (offsetTracker), and keeps the first produce error: one failed
// record fails the whole transaction.
type txnProducer struct {
	ctx      context.Context
	cl       *kgo.Client
	offsets  *offsetTracker
	produced atomic.Int64
	// onDone is the produce callback (done), made once rather than per record.
	onDone func(*kgo.Record, error)

	mu  sync.Mutex
	err error
}

func newTxnProducer(ctx context.Context, cl *kgo.Client, offsets *offsetTracker) *txnProducer {
	p := &txnProducer{ctx: ctx, cl: cl, offsets: offsets}
	p.onDone = p.done
	return p
}

// produce adds r to the transaction (Batch.Produce).
func (p *txnProducer) produce(r *kgo.Record) {
	p.produced.Add(1)
	p.cl.Produce(p.ctx, r, p.onDone)
}

// done is the client's callback for one produced record.
func (p *txnProducer) done(r *kgo.Record, err error) {
	if err != nil {
		p.mu.Lock()
		if p.err == nil {
			p.err = fmt.Errorf("produce to %s: %w", r.Topic, err)
		}
		p.mu.Unlock()
		return
	}
	p.offsets.observe(r)
}

// failure is the first produce error, if any; complete once the client's
// Flush has returned.
func (p *txnProducer) failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// maxProduceAborts is how many transactions in a row may abort on produce
// errors before Run gives up with the error.
const maxProduceAborts = 5

// produceFailed ends a transaction some of whose records the broker refused.
// A fatal error (fencing, authorization) stops the loop; any other aborts the
// transaction, whose records are then processed again – but a record the
// broker will never take must not loop forever: after maxProduceAborts
// aborts in a row the loop stops with the error.
func (l *Loop[T]) produceFailed(ctx context.Context, sess *kgo.GroupTransactSession, perr error, start time.Time) error {
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

// abort ends the open transaction with an abort, best effort.
func (l *Loop[T]) abort(sess *kgo.GroupTransactSession) {
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
func (l *Loop[T]) endError(err error) error {
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
func (l *Loop[T]) invalidate() {
	for _, t := range l.tasks {
		t.verified = false
	}
	l.publishReadiness()
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

// observe notes a produced record's offset if it is a changelog record (the
// client's callbacks may run concurrently).
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
