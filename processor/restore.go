package processor

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/state"
	"github.com/projector-dev/projector/projection"
)

// syncAssignment applies the assignment changes recorded by the group
// callbacks: revoked tasks are dropped, newly assigned ones restored.
func (p *Processor) syncAssignment(ctx context.Context, r *restorer) error {
	p.mu.Lock()
	revoked, pending := p.revoked, p.pending
	p.revoked, p.pending = make(map[state.Task]bool), make(map[state.Task]bool)
	p.mu.Unlock()
	for id := range revoked {
		delete(p.tasks, id)
		p.stats.setAssigned(id, false)
	}
	if len(pending) == 0 {
		return nil
	}
	var ids []state.Task
	for id := range pending {
		t := &task{id: id, prefix: id.Prefix(), since: time.Now(), gaps: make(map[gapKey]time.Time)}
		p.tasks[id] = t
		p.stats.setAssigned(id, true)
		ids = append(ids, id)
	}
	return r.restore(ctx, ids)
}

// verify restores, once per assignment, every task whose records arrived (the
// group has fetched its committed offsets, so a previous owner's transaction
// has resolved and the changelog's last stable offset includes it), and tasks
// idle for longer than a transaction can stay open.
func (p *Processor) verify(ctx context.Context, r *restorer, fetches kgo.Fetches) error {
	var ids []state.Task
	seen := make(map[state.Task]bool)
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		id := state.Task{Topic: fp.Topic, Partition: fp.Partition}
		if t := p.tasks[id]; t != nil && !t.verified && len(fp.Records) > 0 && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	})
	for id, t := range p.tasks {
		if !t.verified && !seen[id] && time.Since(t.since) > p.cfg.TransactionTimeout+p.cfg.SessionTimeout {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if err := r.restore(ctx, ids); err != nil {
		return err
	}
	for _, id := range ids {
		p.tasks[id].verified = true
	}
	p.stats.setReady(p.allVerified())
	return nil
}

func (p *Processor) allVerified() bool {
	for _, t := range p.tasks {
		if !t.verified {
			return false
		}
	}
	return true
}

// restorer reads changelog partitions into Pebble.
type restorer struct {
	p  *Processor
	cl *kgo.Client
}

const restoreChunk = 10000

// restore brings each task's Pebble state up to its changelog partition's last
// stable offset, then rebuilds the task's in-memory gap index.
func (r *restorer) restore(ctx context.Context, ids []state.Task) error {
	p := r.p
	byTopic := make(map[string][]state.Task)
	for _, id := range ids {
		byTopic[ChangelogTopic(p.cfg.Name, id.Topic)] = append(byTopic[ChangelogTopic(p.cfg.Name, id.Topic)], id)
	}
	adm := kadm.NewClient(r.cl)
	for topic, tasks := range byTopic {
		ends, err := adm.ListCommittedOffsets(ctx, topic)
		if err != nil {
			return fmt.Errorf("processor: restore: list offsets of %s: %w", topic, err)
		}
		for _, id := range tasks {
			lo, ok := ends.Lookup(topic, id.Partition)
			if !ok || lo.Err != nil {
				return fmt.Errorf("processor: restore %s: changelog partition %s/%d: %v", id, topic, id.Partition, lo.Err)
			}
			if err := r.restoreTask(ctx, id, topic, lo.Offset); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *restorer) restoreTask(ctx context.Context, id state.Task, topic string, end int64) error {
	p := r.p
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
				return fmt.Errorf("processor: restore %s: %w", id, ferr)
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
				if p.cfg.Dedup.Expired(rec.Key, now) {
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
	if err := r.rebuildGaps(id); err != nil {
		return err
	}
	if n > 0 {
		p.cfg.Logger.Info("restored state from changelog", "task", id.String(), "records", n, "from", from, "to", end, "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// rebuildGaps reloads the task's index of aggregates with held events.
func (r *restorer) rebuildGaps(id state.Task) error {
	p := r.p
	t := p.tasks[id]
	if t == nil {
		return nil
	}
	t.gaps = make(map[gapKey]time.Time)
	heldPrefix := append(id.Prefix(), projection.KindHeld)
	pre := len(id.Prefix())
	return p.cfg.Store.Scan(heldPrefix, func(k, v []byte) error {
		proj, agg, _, err := projection.ParseHeldKey(k[pre:])
		if err != nil {
			return nil // not ours to judge here; inspect reports it
		}
		gk := gapKey{proj, agg}
		if _, ok := t.gaps[gk]; ok {
			return nil
		}
		for _, g := range p.guards {
			if g.P.Name != proj {
				continue
			}
			snap, ok, err := g.Inspect(storeKV{p.cfg.Store}, id.Prefix(), agg)
			if err != nil {
				return err
			}
			if ok && snap.HeldCount > 0 {
				t.gaps[gk] = snap.HeldSince
			}
		}
		return nil
	})
}

// storeKV reads Pebble directly (no staging) for read-only guard calls.
type storeKV struct{ s *state.Store }

func (s storeKV) Get(k []byte) ([]byte, bool, error) { return s.s.Get(k) }
func (storeKV) Set(_, _ []byte)                      { panic("processor: storeKV is read-only") }
func (storeKV) Delete(_ []byte)                      { panic("processor: storeKV is read-only") }
func (s storeKV) Scan(prefix []byte, fn func(k, v []byte) error) error {
	return s.s.Scan(prefix, fn)
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

var _ dedup.KV = (*state.Txn)(nil)
