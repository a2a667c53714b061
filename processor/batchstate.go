package processor

import (
	"time"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/staging"
)

// batchState is what one task's batch of a transaction keeps until the
// transaction ends: its counts, the task's gap-index changes, the gaps it
// expires and its dedup marks. Nothing of it takes effect before the
// transaction commits, so records processed again after an abort are
// neither counted nor applied twice.
type batchState struct {
	ts     *taskState // the batch's task
	counts tally
	// gaps are the task's gap-index changes in the order they happened
	// (zero since: closed), applied in that order, so an aggregate's last
	// change wins. A list, not a map: a stream of held events changes a gap
	// per record, and a map growing by thousands per transaction cost more
	// than the change itself.
	gaps []gapChange
	// expired are the gaps this transaction expired (taskState.inflight
	// until it commits or aborts).
	expired []gapKey
	// marks collects the task's dedup marks into changelog segments; once
	// committed they enter the task's front cache of recent ids.
	marks dedup.Marks
	// kv stages each guard step over the transaction (stage), one step at
	// a time: reused, so a step allocates no overlay of its own.
	kv staging.Overlay
	// trace collects the batch's records and trace contexts for the
	// transaction span; nil when tracing is off (tracing.go).
	trace *traceTally
}

// stage returns the batch's staging overlay over its transaction b, empty:
// the previous step's writes were flushed or are dropped.
func (bs *batchState) stage(b *eos.Batch) *staging.Overlay {
	bs.kv.Reset(b.Txn)
	return &bs.kv
}

// gapChange is one change of an aggregate's gap (zero since: closed).
type gapChange struct {
	key   gapKey
	since time.Time
}

// batchOf is the state of the task's batch b, applied and published when
// the transaction commits. Each task has its own batch, processed by one
// goroutine, so tasks processed concurrently never share one.
func (ts *taskState) batchOf(b *eos.Batch) *batchState {
	if ts.open == b {
		return ts.openState
	}
	bs := &batchState{ts: ts, counts: newTally()}
	ts.open, ts.openState = b, bs
	ts.p.joinSpan(bs)
	b.OnCommit(func() {
		ts.closeBatch(b)
		bs.committed()
	})
	b.OnAbort(func() { ts.closeBatch(b) })
	b.OnCommitted(func() { ts.p.stats.addTally(&bs.counts) })
	return bs
}

// closeBatch forgets the task's batch b once its transaction ended (the
// batch of a later transaction may have taken its place already).
func (ts *taskState) closeBatch(b *eos.Batch) {
	if ts.open == b {
		ts.open, ts.openState = nil, nil
	}
}

// committed applies the task's changes once the transaction committed (in
// transaction order, so a gap a previous transaction opened and this one
// closes ends closed).
func (bs *batchState) committed() {
	for _, c := range bs.gaps {
		if c.since.IsZero() {
			bs.ts.closeGap(c.key)
		} else {
			bs.ts.setGap(c.key, c.since)
		}
	}
	bs.release()
	if !bs.ts.claims { // a claims task has no dedup state (its batch only counts dead letters)
		bs.ts.dedup.Committed(&bs.marks)
	}
}

// expiring records that the transaction expires gap k: it is not due again
// before the transaction's end.
func (bs *batchState) expiring(k gapKey) {
	bs.expired = append(bs.expired, k)
	bs.ts.inflight[k] = struct{}{}
}

// release ends the in-flight expiry of the transaction's gaps (committed:
// the index says what became of them; aborted: the restore rebuilds it).
func (bs *batchState) release() {
	for _, k := range bs.expired {
		delete(bs.ts.inflight, k)
	}
	bs.expired = nil
}
