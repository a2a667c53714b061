package eos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/core/state"
)

// ownedTask is an owned task with its handler as the Handler made it (the
// Task holds it too, as the TaskHandler the loop calls).
type ownedTask[T TaskHandler] struct {
	*Task
	h T
}

// Tasks calls fn with the handler of every owned, verified task. Ownership
// is confirmed against the client's own offsets as well as the callbacks:
// franz-go's transact session forwards only the first revoke until the next
// End, so a task the callbacks still list may already be gone (the client
// deletes revoked and lost partitions from its offsets). A task is offered
// only while the client holds an offset of the group for it (offsetsHeld),
// the one its changes are fenced with: not a partition the group never
// committed, whatever placeholder kgo lists for it.
func (l *Loop[T]) Tasks(fn func(T)) {
	l.eachOwned(func(t ownedTask[T]) { fn(t.h) })
}

// eachOwned calls fn for every owned, verified task (see Tasks).
func (l *Loop[T]) eachOwned(fn func(ownedTask[T])) {
	held := l.offsetsHeld()
	for id, t := range l.tasks {
		if t.verified && held(id) {
			fn(t)
		}
	}
}

// offsetsHeld returns whether the client holds an offset of the group for a
// partition (a snapshot taken now): one it consumed up to and has not
// committed yet, or the group's committed offset – as this loop saw it
// fetched (≥ 0) or committed (groupCommitted), never a placeholder.
//
// kgo's CommittedOffsets also lists placeholders for partitions the group
// never committed (franz-go v1.22.2, pkg/kgo/consumer_group.go):
//   - fetchOffsets replaces a fetched offset < 0 (no commit) by the
//     ConsumeResetOffset and keeps it as committed when its value is ≥ 0:
//     AfterMilli(t), a rebuild --from, holds the time t in unix ms;
//   - updateUncommitted gives a partition first polled with no entry the
//     committed offset {Epoch: -1, Offset: 0} ("uninit"), which an aborted
//     transaction's rewind (setOffsets to CommittedOffsets) keeps.
//
// A task held by a placeholder alone cannot be fenced (fenceOffsets): the
// placeholder would be committed as the group's offset.
func (l *Loop[T]) offsetsHeld() func(state.Task) bool {
	uncommitted, committed := l.clientOffsets()
	l.mu.Lock()
	groupCommitted := maps.Clone(l.groupCommitted)
	l.mu.Unlock()
	return func(id state.Task) bool {
		if _, ok := uncommitted[id.Topic][id.Partition]; ok {
			return true
		}
		_, ok := committed[id.Topic][id.Partition]
		return ok && groupCommitted[id]
	}
}

// offsetsListed returns whether the client lists a partition among its
// uncommitted or committed offsets, placeholders included (a snapshot taken
// now): kgo keeps an entry from the offset fetch or first poll after an
// assignment until the partition is revoked or lost.
func (l *Loop[T]) offsetsListed() func(state.Task) bool {
	uncommitted, committed := l.clientOffsets()
	return func(id state.Task) bool {
		_, a := uncommitted[id.Topic][id.Partition]
		_, b := committed[id.Topic][id.Partition]
		return a || b
	}
}

// clientOffsets are the session client's uncommitted and committed offsets.
func (l *Loop[T]) clientOffsets() (uncommitted, committed map[string]map[int32]kgo.EpochOffset) {
	if l.sess == nil {
		return nil, nil
	}
	return l.sess.Client().UncommittedOffsets(), l.sess.Client().CommittedOffsets()
}

// dropLost revokes the tasks whose partitions the client no longer lists
// among its offsets (placeholders included, offsetsListed) although it did
// since their assignment: a revoke or loss the transact session swallowed
// (it forwards one per End). Their handler state must go now – the
// executor's Runner above all – not at the next callback.
func (l *Loop[T]) dropLost() {
	if len(l.tasks) == 0 {
		return
	}
	listed := l.offsetsListed()
	for id, t := range l.tasks {
		switch {
		case listed(id):
			t.inOffsets = true
		case t.inOffsets:
			l.cfg.Logger.Info("partition no longer held by the client; dropping it", "task", id.String())
			delete(l.tasks, id)
			t.h.Revoked()
			l.stats.setAssigned(id, false)
			l.mu.Lock()
			delete(l.fetched, id)
			delete(l.groupCommitted, id)
			l.standbyChanged = true // it may be tailed now (updateStandby)
			l.mu.Unlock()
			l.needReset = true
		}
	}
}

// resetSession ends an empty transaction so that the session clears its
// revoked flag and forwards the next revoke to our callback (see Tasks).
func (l *Loop[T]) resetSession() {
	if l.sess == nil {
		return
	}
	if err := l.sess.Begin(); err != nil {
		l.cfg.Logger.Debug("reset session: begin", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.TransactionTimeout)
	defer cancel()
	if _, err := l.sess.End(ctx, kgo.TryAbort); err != nil {
		l.cfg.Logger.Debug("reset session: end", "err", err)
		return
	}
	l.needReset = false
}

// onAssigned is kgo's assignment callback: it only records the newly
// assigned tasks (pending), which the loop restores between transactions
// (syncAssignment).
func (l *Loop[T]) onAssigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// kgo calls this after every completed join, also when nothing new is
	// assigned: the member is in the group (readiness with no partitions).
	l.joined = true
	if l.cfg.StandbyReplicas > 0 && !l.standbySynced {
		// The group balanced with another protocol (cooperative-sticky,
		// while a member of an older version is in it): no standby tasks
		// were assigned, so the last ones given are no longer anyone's.
		l.standbyWant, l.standbyChanged = nil, true
	}
	l.standbySynced = false
	for t, parts := range m {
		for _, part := range parts {
			id := state.Task{Topic: t, Partition: part}
			l.pending[id] = true
			delete(l.revoked, id)
		}
	}
}

// onRevoked is kgo's revoke callback: it records the revoked tasks, which
// the loop drops between transactions (syncAssignment); their fetched
// offsets no longer verify them.
func (l *Loop[T]) onRevoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.revokes++
	for t, parts := range m {
		for _, part := range parts {
			id := state.Task{Topic: t, Partition: part}
			l.revoked[id] = true
			delete(l.pending, id)
			delete(l.fetched, id)
			delete(l.groupCommitted, id)
		}
	}
}

// onLost is onRevoked for a member the group dropped (session expired,
// fenced): it must join again before it is ready.
func (l *Loop[T]) onLost(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	l.onRevoked(ctx, cl, m)
	l.mu.Lock()
	l.joined = false
	l.mu.Unlock()
}

// onOffsetsFetched records the partitions whose committed offsets the group
// fetched after an assignment. kgo fetches with require_stable (KIP-447):
// the broker answers only once no transaction holds pending offsets for
// them, and every transaction that changes a task's state commits an offset
// for its partition (fence), so by now any previous owner's transaction
// has resolved and the changelog's last stable offset includes it. An
// offset ≥ 0 is the group's committed offset (groupCommitted); -1 says it
// has none, whatever kgo then lists (offsetsHeld).
func (l *Loop[T]) onOffsetsFetched(_ context.Context, _ *kgo.Client, resp *kmsg.OffsetFetchResponse) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	add := func(topic string, part int32, code int16, offset int64) {
		if code != 0 {
			return
		}
		id := state.Task{Topic: topic, Partition: part}
		l.fetched[id] = true
		if offset >= 0 {
			l.groupCommitted[id] = true
		}
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			add(t.Topic, p.Partition, p.ErrorCode, p.Offset)
		}
	}
	for _, g := range resp.Groups {
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				add(t.Topic, p.Partition, p.ErrorCode, p.Offset)
			}
		}
	}
	return nil
}

// noteCommitted records that a committed transaction committed the group's
// offsets of these partitions (the client's uncommitted offsets at its End),
// for those still assigned since their offsets were fetched.
func (l *Loop[T]) noteCommitted(offsets map[string]map[int32]kgo.EpochOffset) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for topic, parts := range offsets {
		for part := range parts {
			if id := (state.Task{Topic: topic, Partition: part}); l.fetched[id] {
				l.groupCommitted[id] = true
			}
		}
	}
}

// syncAssignment applies the assignment changes recorded by the group
// callbacks: revoked tasks are dropped, newly assigned ones restored.
func (l *Loop[T]) syncAssignment(ctx context.Context, r *restorer) error {
	l.mu.Lock()
	revoked, pending := l.revoked, l.pending
	l.revoked, l.pending = make(map[state.Task]bool), make(map[state.Task]bool)
	l.mu.Unlock()
	if len(revoked) > 0 || len(pending) > 0 {
		// Hooks of a committed transaction touch task state: run them
		// before tasks go or come.
		if err := l.settle(); err != nil {
			return err
		}
	}
	for id := range revoked {
		if t, ok := l.tasks[id]; ok {
			delete(l.tasks, id)
			t.h.Revoked()
		}
		l.stats.setAssigned(id, false)
	}
	if len(revoked) > 0 {
		l.needReset = true
	}
	if err := l.updateStandby(pending, len(revoked) > 0); err != nil {
		return err
	}
	if len(pending) == 0 {
		return nil
	}
	var ts []*Task
	for id := range pending {
		t := &Task{ID: id, Prefix: id.Prefix(), since: time.Now()}
		if old, ok := l.tasks[id]; ok {
			old.h.Revoked()
		}
		h := l.h.NewTask(t)
		t.h = h
		l.tasks[id] = ownedTask[T]{Task: t, h: h}
		l.stats.setAssigned(id, true)
		ts = append(ts, t)
	}
	l.publishReadiness()
	return r.restore(ctx, ts, false)
}

// verify restores, once per assignment, every task whose records arrived or
// whose committed offsets the group has fetched (onOffsetsFetched): by then
// a previous owner's transaction has resolved and the changelog's last
// stable offset includes it. A task that has neither (kgo did not report
// the fetch) is verified after the longest a transaction can stay open.
func (l *Loop[T]) verify(ctx context.Context, r *restorer, fetches kgo.Fetches) error {
	var ts []*Task
	seen := make(map[state.Task]bool)
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		id := state.Task{Topic: fp.Topic, Partition: fp.Partition}
		if t, ok := l.tasks[id]; ok && !t.verified && len(fp.Records) > 0 && !seen[id] {
			seen[id] = true
			ts = append(ts, t.Task)
		}
	})
	l.mu.Lock()
	for id, t := range l.tasks {
		if t.verified || seen[id] {
			continue
		}
		if l.fetched[id] || time.Since(t.since) > l.cfg.TransactionTimeout+l.cfg.SessionTimeout {
			ts = append(ts, t.Task)
		}
	}
	l.mu.Unlock()
	if len(ts) > 0 {
		if err := r.restore(ctx, ts, true); err != nil {
			return err
		}
	}
	l.publishReadiness()
	return nil
}

// publishReadiness tells Stats whether the loop is ready
// (docs/contract.md#health-and-readiness: joined the group and every assigned
// partition restored, also with none assigned) and, if not, why.
func (l *Loop[T]) publishReadiness() {
	l.mu.Lock()
	joined := l.joined
	l.mu.Unlock()
	missing := l.stats.MissingInputs()
	var restoring []string
	for id, t := range l.tasks {
		if !t.verified {
			restoring = append(restoring, id.String())
		}
	}
	switch {
	case len(missing) > 0:
		l.stats.setReadiness(false, fmt.Sprintf("input topic %s does not exist (create it; the worker waits for it)", strings.Join(missing, ", ")))
	case !joined:
		l.stats.setReadiness(false, "joining consumer group "+l.cfg.Group)
	case l.held != nil:
		l.stats.setReadiness(false, "holding: "+l.held.reason+" (records wait, nothing is dead-lettered)")
	case len(restoring) > 0:
		slices.Sort(restoring)
		l.stats.setReadiness(false, fmt.Sprintf("group %s: restoring %d of %d partitions (%s)", l.cfg.Group, len(restoring), len(l.tasks), strings.Join(restoring, ", ")))
	default:
		l.stats.setReadiness(true, "")
	}
}
