package eos

import (
	"context"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/core/state"
)

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
//
// The offsets End commits, the client's uncommitted ones, are the group's
// from then on (noteCommitted).
func (l *Loop[T]) end(ctx context.Context, sess *kgo.GroupTransactSession, tx *txnBatches, consumed bool, revokesAtBegin int) (bool, error) {
	// The loop goroutine polls, so these are the offsets End commits.
	uncommitted := sess.Client().UncommittedOffsets()
	fence, ok := l.fenceOffsets(tx, uncommitted)
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
	committed, err := sess.End(ctx, kgo.TryCommit)
	if committed {
		l.noteCommitted(uncommitted)
	}
	return committed, err
}

// fenceOffsets returns the committed offsets of the tasks whose state the
// transaction changes without consuming their records (uncommitted: the
// offsets End commits). ok is false when a changed task cannot be fenced –
// it is not owned and verified, or the group holds no offset for it – and
// the transaction must not commit. Only an offset the group committed
// (groupCommitted) fences: kgo's placeholder for a partition the group never
// committed (offsetsHeld) would be committed as its offset – for a rebuild
// --from, a time in unix ms.
func (l *Loop[T]) fenceOffsets(tx *txnBatches, uncommitted map[string]map[int32]kgo.EpochOffset) (map[state.Task]kgo.EpochOffset, bool) {
	if len(tx.children) == 0 {
		return nil, true
	}
	committed := l.sess.Client().CommittedOffsets()
	l.mu.Lock()
	groupCommitted := maps.Clone(l.groupCommitted)
	l.mu.Unlock()
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
		ok = ok && groupCommitted[id] && eo.Offset >= 0
		if !ok || !tx.owned[c.task] {
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
