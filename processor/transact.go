package processor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/envelope"
	"github.com/projector-dev/projector/internal/state"
	"github.com/projector-dev/projector/projection"
)

// Dead-letter reasons (header projector-reason).
const (
	ReasonConflict     = "conflict"
	ReasonGapTimeout   = "gap-timeout"
	ReasonHandlerError = "handler-error"
	HeaderReason       = "projector-reason"
	HeaderError        = "projector-error"
	HeaderSource       = "projector-source"
	endTimeoutHeadroom = 10 * time.Second
)

// batch is one transaction's work: the staged state, the records to produce
// and the counters to publish if it commits.
type batch struct {
	txn   *state.Txn
	recs  []*kgo.Record
	tally tally
	now   time.Time
}

// transact runs one Kafka transaction over the polled records and the expired
// gaps. It returns an error only when the loop must stop.
func (p *Processor) transact(sess *kgo.GroupTransactSession, fetches kgo.Fetches, expiring []expiry, now time.Time) error {
	start := time.Now()
	if err := sess.Begin(); err != nil {
		return fmt.Errorf("processor: begin transaction: %w", err)
	}
	b := &batch{txn: p.cfg.Store.NewTxn(), now: now, tally: newTally()}
	var err error
	for _, e := range expiring {
		if err = p.expire(b, e); err != nil {
			break
		}
	}
	if err == nil {
		fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
			t := p.tasks[state.Task{Topic: fp.Topic, Partition: fp.Partition}]
			for _, r := range fp.Records {
				if err != nil {
					return
				}
				if t == nil {
					// Revoked while polled: the session aborts this
					// transaction; skip its records.
					continue
				}
				err = p.process(b, t, r)
			}
		})
	}
	if err != nil {
		// A state read failed (Pebble error): abort and stop; nothing is lost.
		p.abort(sess)
		return err
	}
	p.stageChangelog(b)

	// Produce everything, then flush so that every produce error is known
	// before deciding between commit and abort.
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.TransactionTimeout+endTimeoutHeadroom)
	defer cancel()
	cl := sess.Client()
	offsets := newOffsetTracker(p.cfg.Name, p.cfg.Inputs)
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
		p.abort(sess)
		return fmt.Errorf("processor: flush: %w", err)
	}
	if perr != nil {
		p.cfg.Logger.Warn("produce failed; aborting transaction", "err", perr)
		if isFatal(perr) {
			p.abort(sess)
			return fmt.Errorf("%w: %v", ErrFenced, perr)
		}
		if _, err := sess.End(ctx, kgo.TryAbort); err != nil {
			return p.endError(err)
		}
		p.stats.addTxn("aborted", time.Since(start))
		p.invalidate()
		return nil
	}
	if h := p.cfg.Hooks; h != nil && h.AfterStage != nil {
		if err := h.AfterStage(); err != nil {
			return err
		}
	}
	committed, err := sess.End(ctx, kgo.TryCommit)
	if err != nil {
		return p.endError(err)
	}
	if !committed {
		// (false, nil): a rebalance or an abortable offset-commit error. The
		// session rewinds to the committed offsets; drop the staged state.
		p.cfg.Logger.Info("transaction aborted; records will be processed again", "records", fetches.NumRecords())
		p.stats.addTxn("aborted", time.Since(start))
		p.invalidate()
		return nil
	}
	if h := p.cfg.Hooks; h != nil && h.AfterCommit != nil {
		if err := h.AfterCommit(); err != nil {
			return err
		}
	}
	for id, next := range offsets.next {
		b.txn.SetChangelogOffset(id, next)
	}
	if err := b.txn.Commit(); err != nil {
		// Kafka has the transaction; Pebble does not. Stop: on restart the
		// changelog restores what is missing (invariant 2).
		return fmt.Errorf("processor: state commit after Kafka commit: %w", err)
	}
	p.stats.addTally(b.tally)
	p.stats.addTxn("committed", time.Since(start))
	return nil
}

// abort ends the open transaction with an abort, best effort.
func (p *Processor) abort(sess *kgo.GroupTransactSession) {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.TransactionTimeout)
	defer cancel()
	if _, err := sess.End(ctx, kgo.TryAbort); err != nil {
		p.cfg.Logger.Warn("abort failed", "err", err)
	}
}

// endError classifies an error from End. None is retryable (franz-go's
// contract): the outcome may be unknown, so local state can no longer be
// trusted to match Kafka. The loop stops; a restart restores from the
// changelog.
func (p *Processor) endError(err error) error {
	p.stats.addTxn("failed", 0)
	if isFatal(err) {
		return fmt.Errorf("%w: %v", ErrFenced, err)
	}
	return fmt.Errorf("processor: end transaction: %w", err)
}

// invalidate forces every task to be restored again before its next records:
// after an abort nothing in Pebble changed, but a restore is cheap and
// guarantees the in-memory gap index matches Pebble.
func (p *Processor) invalidate() {
	for _, t := range p.tasks {
		t.verified = false
	}
	p.stats.setReady(false)
}

// process handles one input record.
func (p *Processor) process(b *batch, t *task, r *kgo.Record) error {
	var ev envelope.Event
	if err := envelope.DecodeInto(r.Value, p.cfg.MaxRecordBytes, &ev); err != nil {
		reason, msg := "invalid:value", err.Error()
		var ee *envelope.Error
		if errors.As(err, &ee) {
			reason = ee.Reason()
		}
		p.deadLetter(b, t.id, r.Offset, r.Key, r.Value, reason, msg)
		b.tally.add("", "invalid")
		return nil
	}
	var matched []*projection.Guard
	for _, g := range p.guards {
		if g.P.Accepts(ev.AggregateType) {
			matched = append(matched, g)
		}
	}
	fp := ev.Fingerprint()
	id := dedup.MakeID(ev.TenantID, ev.EventID)
	verdict, err := p.cfg.Dedup.Check(b.txn, t.prefix, id, fp, b.now)
	if err != nil {
		return err
	}
	switch verdict {
	case dedup.Duplicate:
		b.tally.addAll(matched, "duplicate")
		return nil
	case dedup.Conflict:
		p.deadLetter(b, t.id, r.Offset, r.Key, r.Value, ReasonConflict,
			fmt.Sprintf("event %q was seen before with a different fingerprint", ev.EventID))
		b.tally.addAll(matched, "conflict")
		return nil
	}
	if ev.AggregateVersion == 0 {
		for _, g := range matched {
			if g.P.Versioned {
				p.deadLetter(b, t.id, r.Offset, r.Key, r.Value, "invalid:aggregateVersion",
					"envelope: invalid aggregateVersion: required by versioned projection "+g.P.Name)
				b.tally.add("", "invalid")
				return nil
			}
		}
	}
	p.cfg.Dedup.Mark(b.txn, t.prefix, id, fp, b.now)
	src := projection.Source{Offset: r.Offset, Key: r.Key, Value: r.Value}
	for _, g := range matched {
		step, err := g.Offer(b.txn, t.prefix, &ev, src, b.now)
		if err != nil {
			return err
		}
		b.tally.add(g.P.Name, outcomeLabel(step.Outcome))
		if n := len(step.Changes); step.Outcome == projection.Applied && n > 1 {
			b.tally.addN(g.P.Name, "applied", n-1) // drained held events
		} else if step.Outcome != projection.Applied && n > 0 {
			b.tally.addN(g.P.Name, "applied", n)
		}
		p.emitStep(b, t, g, ev.AggregateID, step)
	}
	return nil
}

func outcomeLabel(o projection.Outcome) string {
	switch o {
	case projection.Applied:
		return "applied"
	case projection.Stale:
		return "stale"
	case projection.Held:
		return "held"
	default: // Failed, Overflow: dead-lettered with the reason

		return "failed"
	}
}

// emitStep turns a guard step into output records and gap-index updates.
func (p *Processor) emitStep(b *batch, t *task, g *projection.Guard, aggregate string, step projection.Step) {
	for _, c := range step.Changes {
		b.recs = append(b.recs, projectionRecord(g.P, c))
		if len(c.Effects) > 0 {
			p.emitIntents(b, g.P, c)
		}
	}
	for _, f := range step.Failures {
		p.deadLetter(b, t.id, f.Source.Offset, f.Source.Key, f.Source.Value, ReasonHandlerError, f.Err.Error())
	}
	for _, d := range step.Dropped {
		p.deadLetter(b, t.id, d.Offset, d.Key, d.Value, ReasonGapTimeout, "held event dropped: gap not filled (or held limit reached)")
	}
	if g.P.Versioned && (step.Outcome == projection.Held || len(step.Changes) > 0 || len(step.Dropped) > 0) {
		p.trackGap(b, t, gapKey{g.P.Name, aggregate}, step)
	}
}

// trackGap updates the task's gap index after the transaction commits.
func (p *Processor) trackGap(b *batch, t *task, k gapKey, step projection.Step) {
	count, since := step.HeldCount, step.HeldSince
	b.txn.AfterCommit(func() {
		if count > 0 {
			t.gaps[k] = since
		} else {
			delete(t.gaps, k)
		}
	})
}

func (p *Processor) deadLetter(b *batch, id state.Task, offset int64, key, value []byte, reason, msg string) {
	b.recs = append(b.recs, &kgo.Record{
		Topic: p.cfg.DeadLetterTopic,
		Key:   key,
		Value: value,
		Headers: []kgo.RecordHeader{
			{Key: HeaderReason, Value: []byte(reason)},
			{Key: HeaderError, Value: []byte(msg)},
			{Key: HeaderSource, Value: []byte(id.Topic + "/" + strconv.Itoa(int(id.Partition)) + "/" + strconv.FormatInt(offset, 10))},
		},
	})
	b.tally.deadLetter(reason)
}

// stageChangelog turns the staged state into changelog records, one per key.
func (p *Processor) stageChangelog(b *batch) {
	b.txn.Each(func(key string, val []byte) {
		id, rest, err := state.SplitKey([]byte(key))
		if err != nil {
			return
		}
		b.recs = append(b.recs, &kgo.Record{
			Topic:     ChangelogTopic(p.cfg.Name, id.Topic),
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

func newOffsetTracker(name string, inputs []string) *offsetTracker {
	o := &offsetTracker{inputOf: make(map[string]string, len(inputs)), next: make(map[state.Task]int64)}
	for _, in := range inputs {
		o.inputOf[ChangelogTopic(name, in)] = in
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
