package processor

import (
	"time"

	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/engine/guard"
	"github.com/projector-dev/projector/projection"
)

// expireChunk bounds the gaps one transaction expires; due gaps beyond it
// are left to the following transactions. Each Guard.Expire reads the
// aggregate's held events through the transaction's staged writes, which
// it scans whole (state.Txn.Scan): expiring every due gap in one
// transaction cost the square of their number (20k gaps: 7.5 s, 50k: past
// the transaction timeout, and the restore rebuilt the same index). With
// the bound, an expiry scans at most this chunk's writes and the previous
// transaction's, so a transaction's expiry work is bounded and the total
// is linear in the number of gaps.
const expireChunk = 1000

// expiry is one aggregate whose gap outlived the hold timeout.
type expiry struct {
	ts  *taskState
	key gapKey
}

// expiring lists at most limit gaps to resolve now (none under the wait
// policy; those are only reported), from the tasks' queues of due gaps. A
// task's queue is refilled by one look through its gap index once it is
// empty, so the index is read once per round of expiry, not once per
// transaction.
func (p *Processor) expiring(now time.Time, limit int) []expiry {
	if p.cfg.GapPolicy == projection.Wait {
		return nil
	}
	var out []expiry
	p.loop.Tasks(func(ts *taskState) {
		if len(out) >= limit {
			return
		}
		if len(ts.due) == 0 {
			ts.findDue(now, p.cfg.HoldTimeout)
		}
		for len(out) < limit && len(ts.due) > 0 {
			k := ts.due[0]
			ts.due = ts.due[1:]
			if ts.isDue(k, now, p.cfg.HoldTimeout) {
				out = append(out, expiry{ts: ts, key: k})
			}
		}
		if len(ts.due) == 0 {
			ts.due = nil // release the queue's array
		}
	})
	return out
}

// gapsDue reports whether expiring would list a gap, without taking any.
func (p *Processor) gapsDue(now time.Time) bool {
	if p.cfg.GapPolicy == projection.Wait {
		return false
	}
	due := false
	p.loop.Tasks(func(ts *taskState) {
		if due {
			return
		}
		// Drop what is no longer due from the queue's head; refill it
		// when empty.
		for len(ts.due) > 0 && !ts.isDue(ts.due[0], now, p.cfg.HoldTimeout) {
			ts.due = ts.due[1:]
		}
		if len(ts.due) == 0 {
			ts.findDue(now, p.cfg.HoldTimeout)
		}
		due = len(ts.due) > 0
	})
	return due
}

// findDue queues every gap of the index that is due and not being expired.
// The walk is skipped while no projection's oldest gap is due (the common
// case with many gaps open: Due asks on every poll).
func (ts *taskState) findDue(now time.Time, hold time.Duration) {
	ts.due = ts.due[:0]
	if !ts.oldestDue(now, hold) {
		return
	}
	for k, since := range ts.gaps {
		if now.Sub(time.UnixMilli(since)) >= hold {
			if _, busy := ts.inflight[k]; !busy {
				ts.due = append(ts.due, k)
			}
		}
	}
}

// oldestDue reports whether some projection's oldest open gap has waited
// the hold timeout (from the summary setGap and closeGap keep).
func (ts *taskState) oldestDue(now time.Time, hold time.Duration) bool {
	for name := range ts.sums {
		if n, oldest := ts.summary(name); n > 0 && now.Sub(oldest) >= hold {
			return true
		}
	}
	return false
}

// isDue: the index still lists k as open past the hold timeout and no
// transaction in flight has expired it.
func (ts *taskState) isDue(k gapKey, now time.Time, hold time.Duration) bool {
	since, ok := ts.gaps[k]
	if !ok || now.Sub(time.UnixMilli(since)) < hold {
		return false
	}
	_, busy := ts.inflight[k]
	return !busy
}

// expire resolves one expired gap inside the transaction (b is the task's
// batch).
func (p *Processor) expire(b *eos.Batch, e expiry) error {
	ts := e.ts
	bs := ts.batchOf(b)
	if len(bs.expired) == 0 {
		b.OnAbort(bs.release)
	}
	bs.expiring(e.key)
	for _, g := range p.guards {
		if g.P.Name != e.key.projection {
			continue
		}
		// The gap index may lag the state by the transaction whose
		// commit hooks have not run yet (decision 004): Expire decides on
		// the aggregate as this transaction sees it (a gap closed or
		// moved meanwhile is not due), and emitStep records what it
		// reports (the lagging hooks close a gap closed meanwhile).
		step, dropped, err := p.resolveGap(b, ts, g, e.key.aggregate, p.cfg.GapPolicy, p.cfg.HoldTimeout)
		if err != nil {
			return err
		}
		if dropped == nil && step.HeldCount == step.HeldBefore && len(step.Changes)+len(step.Dropped)+len(step.Failures) == 0 {
			continue // not due
		}
		p.cfg.Logger.Info("gap timed out", "projection", g.P.Name, "aggregate", e.key.aggregate,
			"policy", p.cfg.GapPolicy, "applied", len(step.Changes), "deadLettered", len(step.Dropped), "tooLarge", dropped != nil)
	}
	return nil
}

// resolveGap resolves aggregate's gap in g's projection under pol once it
// is hold old (expireStep) – a timed-out gap, or an operator's skip-gap –
// and emits the step: the applied held events (counted), the dead letters,
// the gap-index update, and the too-large dead letter of the held event the
// skip left unapplied, which it returns (nil: none).
func (p *Processor) resolveGap(b *eos.Batch, ts *taskState, g *guard.Guard, aggregate string, pol projection.Policy, hold time.Duration) (checkedStep, *guard.Change, error) {
	step, dropped, why, err := p.expireStep(b, ts, g, aggregate, pol, hold)
	if err != nil {
		return step, nil, err
	}
	bs := ts.batchOf(b)
	bs.counts.addN(g.P.Name, OutcomeApplied, len(step.Changes))
	p.emitStep(b, ts, g, aggregate, step)
	if c := dropped; c != nil {
		p.deadLetter(b, ts, c.Source.Offset, c.Source.Key, c.Source.Value, ReasonTooLarge, "projection "+g.P.Name+": "+why)
		bs.counts.add(g.P.Name, OutcomeTooLarge)
	}
	return step, dropped, nil
}
