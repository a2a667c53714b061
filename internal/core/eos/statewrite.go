package eos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/projector-dev/projector/internal/core/state"
)

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
	phases   phases
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
	f.phases.mark(&f.phases.write)
	f.took = time.Since(f.start)
	close(f.done)
}

// settle waits for the in-flight Pebble write, if any, and finishes it.
func (l *Loop[T]) settle() error {
	f := l.inflight
	if f == nil {
		return nil
	}
	l.inflight = nil
	<-f.done
	return l.finish(f)
}

// finish runs a written transaction's hooks, or reports its failed write.
func (l *Loop[T]) finish(f *inflight) error {
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
		ph := f.phases
		l.cfg.Logger.Debug("transaction committed", "records", f.records, "produced", f.produced, "took", f.took,
			"process", ph.process, "flush", ph.flush, "commit", ph.commit, "settle", ph.settle, "write", ph.write)
	}
	return nil
}

// writeState writes a transaction Kafka committed to Pebble. Each task's txn
// stops reading through the previous transaction's (Pebble has it now) and
// records the offset after its last changelog record. Without AsyncCommit
// the write and its hooks run here; with it the write runs on a goroutine
// while the loop goes on, and settle finishes it.
func (l *Loop[T]) writeState(tx *txnBatches, p *txnProducer, start time.Time, ph phases, records int) error {
	tx.bases = nil // the previous transaction is in Pebble now
	for _, c := range tx.children {
		c.Txn.Detach()
		if next, ok := p.offsets.next[c.task.ID]; ok {
			c.Txn.SetChangelogOffset(c.task.ID, next)
		}
	}
	f := &inflight{done: make(chan struct{}), tx: tx, start: start, phases: ph, records: records, produced: p.produced.Load()}
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

// phases is where a committed transaction's time went, for the debug log:
// processing its records (from Begin), flushing its produces, ending it at
// the broker, waiting for the previous transaction's Pebble write, and its
// own Pebble write. The spans a slow transaction shows name its cause.
type phases struct {
	last                                  time.Time
	process, flush, commit, settle, write time.Duration
}

// mark ends the phase d at now and starts the next.
func (p *phases) mark(d *time.Duration) {
	now := time.Now()
	*d, p.last = now.Sub(p.last), now
}
