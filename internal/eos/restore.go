package eos

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/state"
)

// syncAssignment applies the assignment changes recorded by the group
// callbacks: revoked tasks are dropped, newly assigned ones restored.
func (l *Loop) syncAssignment(ctx context.Context, r *restorer) error {
	l.mu.Lock()
	revoked, pending := l.revoked, l.pending
	l.revoked, l.pending = make(map[state.Task]bool), make(map[state.Task]bool)
	l.mu.Unlock()
	for id := range revoked {
		if t := l.tasks[id]; t != nil {
			delete(l.tasks, id)
			l.h.Revoked(t)
		}
		l.stats.setAssigned(id, false)
	}
	if len(pending) == 0 {
		return nil
	}
	var ts []*Task
	for id := range pending {
		t := &Task{ID: id, Prefix: id.Prefix(), since: time.Now()}
		if old := l.tasks[id]; old != nil {
			l.h.Revoked(old)
		}
		l.tasks[id] = t
		l.stats.setAssigned(id, true)
		ts = append(ts, t)
	}
	return r.restore(ctx, ts)
}

// verify restores, once per assignment, every task whose records arrived (the
// group has fetched its committed offsets, so a previous owner's transaction
// has resolved and the changelog's last stable offset includes it), and tasks
// idle for longer than a transaction can stay open.
func (l *Loop) verify(ctx context.Context, r *restorer, fetches kgo.Fetches) error {
	var ts []*Task
	seen := make(map[state.Task]bool)
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		id := state.Task{Topic: fp.Topic, Partition: fp.Partition}
		if t := l.tasks[id]; t != nil && !t.verified && len(fp.Records) > 0 && !seen[id] {
			seen[id] = true
			ts = append(ts, t)
		}
	})
	for id, t := range l.tasks {
		if !t.verified && !seen[id] && time.Since(t.since) > l.cfg.TransactionTimeout+l.cfg.SessionTimeout {
			ts = append(ts, t)
		}
	}
	if len(ts) == 0 {
		return nil
	}
	if err := r.restore(ctx, ts); err != nil {
		return err
	}
	for _, t := range ts {
		t.verified = true
	}
	l.stats.setReady(l.allVerified())
	return nil
}

func (l *Loop) allVerified() bool {
	for _, t := range l.tasks {
		if !t.verified {
			return false
		}
	}
	return true
}

// restorer reads changelog partitions into Pebble.
type restorer struct {
	l  *Loop
	cl *kgo.Client
}

const restoreChunk = 10000

// restore brings each task's Pebble state up to its changelog partition's last
// stable offset, then lets the handler rebuild its in-memory state.
func (r *restorer) restore(ctx context.Context, ts []*Task) error {
	l := r.l
	byTopic := make(map[string][]*Task)
	for _, t := range ts {
		cl := l.cfg.ChangelogOf(t.ID.Topic)
		byTopic[cl] = append(byTopic[cl], t)
	}
	adm := kadm.NewClient(r.cl)
	for topic, tasks := range byTopic {
		ends, err := adm.ListCommittedOffsets(ctx, topic)
		if err != nil {
			return fmt.Errorf("eos: restore: list offsets of %s: %w", topic, err)
		}
		for _, t := range tasks {
			lo, ok := ends.Lookup(topic, t.ID.Partition)
			if !ok || lo.Err != nil {
				return fmt.Errorf("eos: restore %s: changelog partition %s/%d: %v", t.ID, topic, t.ID.Partition, lo.Err)
			}
			if err := r.restoreTask(ctx, t.ID, topic, lo.Offset); err != nil {
				return err
			}
			if err := l.h.Restored(t); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *restorer) restoreTask(ctx context.Context, id state.Task, topic string, end int64) error {
	p := r.l
	st := p.cfg.Store
	from, err := st.ChangelogOffset(id)
	if err != nil {
		return err
	}
	if from > end {
		// The changelog is behind our cache: it was recreated. The changelog
		// is the truth, so drop the task's local state and start over.
		p.cfg.Logger.Warn("local state is ahead of the changelog; discarding it", "task", id.String(), "stored", from, "changelog", end)
		pre := id.Prefix()
		if err := st.DeleteRange(pre, prefixEnd(pre)); err != nil {
			return err
		}
		from = 0
		if err := st.Restore(id, nil, 0); err != nil {
			return err
		}
	}
	start := time.Now()
	n := 0
	if from < end {
		r.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: {id.Partition: kgo.NewOffset().At(from)}})
		defer r.cl.RemoveConsumePartitions(map[string][]int32{topic: {id.Partition}})
		next := from
		var chunk []state.Record
		now := p.cfg.Now()
		idle := 0
		for next < end {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			fs := r.cl.PollRecords(pctx, restoreChunk)
			cancel()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			got := 0
			var ferr error
			fs.EachError(func(_ string, _ int32, err error) {
				if ctx.Err() == nil && err != context.DeadlineExceeded {
					ferr = err
				}
			})
			if ferr != nil {
				return fmt.Errorf("eos: restore %s: %w", id, ferr)
			}
			fs.EachRecord(func(rec *kgo.Record) {
				if rec.Topic != topic || rec.Partition != id.Partition || rec.Offset < next {
					return
				}
				got++
				next = rec.Offset + 1
				if rec.Attrs.IsControl() {
					return
				}
				if p.cfg.Expired != nil && p.cfg.Expired(rec.Key, now) {
					return
				}
				chunk = append(chunk, state.Record{Key: rec.Key, Value: rec.Value})
				n++
			})
			if len(chunk) >= restoreChunk || (next >= end && len(chunk) > 0) || got > 0 {
				if err := st.Restore(id, chunk, next); err != nil {
					return err
				}
				p.stats.addRestored(len(chunk))
				chunk = chunk[:0]
			}
			if got == 0 {
				idle++
				// Compaction may remove the trailing records of a range
				// (kfake keeps transaction markers; a real cluster may not).
				if idle >= 5 {
					p.cfg.Logger.Warn("restore saw no records before the end offset; taking the partition as restored", "task", id.String(), "at", next, "end", end)
					if err := st.Restore(id, nil, end); err != nil {
						return err
					}
					break
				}
				continue
			}
			idle = 0
		}
	}
	if n > 0 {
		p.cfg.Logger.Info("restored state from changelog", "task", id.String(), "records", n, "from", from, "to", end, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}
