package eos

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

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
	b := &Batch{Txn: l.cfg.Store.NewTxn(), Now: now, dlq: l.cfg.DeadLetterTopic}
	written := false // Kafka committed and Pebble written
	defer func() {
		if !written {
			b.aborted()
		}
	}()
	err := l.h.Begin(b)
	if err == nil {
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			t := l.tasks[state.Task{Topic: fp.Topic, Partition: fp.Partition}]
			if t == nil {
				// Revoked since the poll: the session aborts this
				// transaction; its records come back to the new owner.
				return
			}
			for _, r := range fp.Records {
				if err != nil {
					return
				}
				err = l.h.Process(b, t, r)
			}
		})
	}
	if err != nil {
		// A state read failed (Pebble error): abort and stop; nothing is lost.
		l.abort(sess)
		l.stats.addTxn("aborted", time.Since(start))
		return err
	}
	l.stageChangelog(b)

	// Produce everything, then flush so that every produce error is known
	// before deciding between commit and abort.
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.TransactionTimeout+endTimeoutHeadroom)
	defer cancel()
	cl := sess.Client()
	offsets := newOffsetTracker(l.cfg.Inputs, l.cfg.ChangelogOf)
	var perr error
	var pmu sync.Mutex
	for _, r := range b.recs {
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
	if err := cl.Flush(ctx); err != nil {
		l.abort(sess)
		return fmt.Errorf("eos: flush: %w", err)
	}
	if perr != nil {
		l.cfg.Logger.Warn("produce failed; aborting transaction", "err", perr)
		if isFatal(perr) {
			l.abort(sess)
			return fmt.Errorf("%w: %v", ErrFenced, perr)
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
	committed, err := l.end(ctx, sess, fetches.NumRecords() > 0, revokes)
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
	for id, next := range offsets.next {
		b.Txn.SetChangelogOffset(id, next)
	}
	if err := b.Txn.Commit(); err != nil {
		// Kafka has the transaction; Pebble does not. Stop: on restart the
		// changelog restores what is missing (invariant 2).
		return fmt.Errorf("eos: state commit after Kafka commit: %w", err)
	}
	written = true
	for _, fn := range b.last {
		fn()
	}
	l.stats.addTxn("committed", time.Since(start))
	if l.cfg.Logger.Enabled(context.Background(), slog.LevelDebug) {
		l.cfg.Logger.Debug("transaction committed", "records", fetches.NumRecords(), "produced", len(b.recs), "took", time.Since(start))
	}
	return nil
}

// end commits the transaction if it can. With consumed records it is the
// session's End, which commits their offsets and aborts on any rebalance.
// Without (ledger updates, gap expiry) it ends the transaction directly: the
// session's End would, having committed no offsets, hold its lock for 500 ms
// after the commit (its pre-KIP-447 safety delay) and stall the next
// transaction. The rebalance guard is kept: any revoke since Begin aborts.
func (l *Loop) end(ctx context.Context, sess *kgo.GroupTransactSession, consumed bool, revokesAtBegin int) (bool, error) {
	if consumed {
		l.needReset = false // End clears the session's revoked flag
		return sess.End(ctx, kgo.TryCommit)
	}
	l.mu.Lock()
	revoked := l.revokes != revokesAtBegin
	l.mu.Unlock()
	if err := sess.Client().EndTransaction(ctx, kgo.TransactionEndTry(!revoked)); err != nil {
		return false, err
	}
	return !revoked, nil
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
		return fmt.Errorf("%w: %v", ErrFenced, err)
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
	l.stats.setReady(false)
}

// stageChangelog turns the staged state into changelog records, one per key.
func (l *Loop) stageChangelog(b *Batch) {
	b.Txn.Each(func(key string, val []byte) {
		id, rest, err := state.SplitKey([]byte(key))
		if err != nil {
			return
		}
		b.recs = append(b.recs, &kgo.Record{
			Topic:     l.cfg.ChangelogOf(id.Topic),
			Partition: id.Partition,
			Key:       rest,
			Value:     val,
		})
	})
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
