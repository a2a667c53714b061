package eos

import (
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/state"
)

// Batch is one transaction's work for one task – its staged state, the
// records it produces and what to do once the transaction commits – or, for
// the batch Handler.Begin receives, the transaction as a whole (Txn nil;
// For gives a task's batch). Each task's state is committed to Pebble in its
// own batch with its own changelog offset (state.Store.WriteAll).
//
// Records are handed to the producer as soon as they are added, so the
// broker works while the handler is still processing.
type Batch struct {
	// Txn stages this task's state; nil on the transaction's top batch.
	Txn *state.Txn
	Now time.Time

	task    *Task
	tx      *txnBatches
	commit  []func()
	last    []func()
	onAbort []func()
}

// txnBatches is what the batches of one transaction share.
type txnBatches struct {
	store    *state.Store
	dlq      string
	produce  func(*kgo.Record)
	top      *Batch
	children []*Batch // in creation order
	byTask   map[state.Task]*Batch
	// bases are the previous transaction's task batches while their Pebble
	// write is in flight (AsyncCommit): task txns read through theirs.
	bases map[state.Task]*Batch
	// owned are the tasks owned and verified when the transaction began
	// (Loop.Tasks); only they may be changed outside Process.
	owned map[*Task]bool
}

func newTxnBatches(store *state.Store, now time.Time, dlq string, produce func(*kgo.Record), bases map[state.Task]*Batch) *Batch {
	tx := &txnBatches{store: store, dlq: dlq, produce: produce, byTask: map[state.Task]*Batch{}, bases: bases}
	tx.top = &Batch{Now: now, tx: tx}
	return tx.top
}

// For returns task t's batch in this transaction, creating it on first use.
// It must not be called while tasks are processed concurrently (it is meant
// for Handler.Begin); a task's own batch is what TaskHandler.Process
// receives.
func (b *Batch) For(t *Task) *Batch {
	if b.task == t {
		return b
	}
	tx := b.tx
	if c, ok := tx.byTask[t.ID]; ok {
		return c
	}
	var base *state.Txn
	if p := tx.bases[t.ID]; p != nil {
		base = p.Txn
	}
	c := &Batch{Txn: tx.store.NewTxnOver(base, t.stagedHint), Now: tx.top.Now, task: t, tx: tx}
	tx.byTask[t.ID] = c
	tx.children = append(tx.children, c)
	return c
}

// Task is the batch's task; nil on the transaction's top batch.
func (b *Batch) Task() *Task { return b.task }

// Owns reports whether t was owned and verified when the transaction began:
// a handler's Begin may change only such tasks (For); the transaction aborts
// if it changes another (see Loop.end).
func (b *Batch) Owns(t *Task) bool { return b.tx.owned[t] }

// OnCommit registers fn to run after the transaction committed and Pebble was
// written (never after an abort).
func (b *Batch) OnCommit(fn func()) { b.commit = append(b.commit, fn) }

// OnCommitted registers fn to run once the transaction committed, after every
// OnCommit hook (summaries that must see all of the transaction's updates).
func (b *Batch) OnCommitted(fn func()) { b.last = append(b.last, fn) }

// OnAbort registers fn to run if the transaction does not commit (aborted,
// failed, or the loop stopped with it open).
func (b *Batch) OnAbort(fn func()) { b.onAbort = append(b.onAbort, fn) }

// all is the top batch and every task batch, top last.
func (tx *txnBatches) all() []*Batch { return append(slices.Clone(tx.children), tx.top) }

// aborted runs the abort hooks, once.
func (tx *txnBatches) aborted() {
	for _, b := range tx.all() {
		for _, fn := range b.onAbort {
			fn()
		}
		b.onAbort = nil
	}
}

// committed runs the commit hooks, then the committed hooks.
func (tx *txnBatches) committed() {
	all := tx.all()
	for _, b := range all {
		for _, fn := range b.commit {
			fn()
		}
	}
	for _, b := range all {
		for _, fn := range b.last {
			fn()
		}
	}
}

// Produce adds a record to the transaction.
func (b *Batch) Produce(r *kgo.Record) { b.tx.produce(r) }

// NewTaskBatch returns a standalone transaction holding task t's batch,
// outside any loop: for benchmarks and tools that drive a handler directly.
// Records, changelog records included, go to produce; Commit stages and
// writes the batch as the loop does.
func NewTaskBatch(st *state.Store, t *Task, now time.Time, produce func(*kgo.Record)) *Batch {
	return newTxnBatches(st, now, "", produce, nil).For(t)
}

// Commit ends a standalone batch (NewTaskBatch) as the loop ends a task's
// batch – the task handler h's Stage, the changelog records to changelog –
// then writes its state to Pebble and runs its commit hooks.
func (b *Batch) Commit(h TaskHandler, changelog string) error {
	if err := stageChangelog(h, changelog, b); err != nil {
		return err
	}
	if err := b.Txn.Commit(); err != nil {
		return err
	}
	b.tx.committed()
	return nil
}

// Abort ends a standalone batch (NewTaskBatch) as the loop ends a
// transaction that does not commit: nothing is written, its abort hooks run.
func (b *Batch) Abort() { b.tx.aborted() }
