package processor

import (
	"fmt"
	"time"

	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/staging"
	"github.com/projector-dev/projector/internal/engine/guard"
	"github.com/projector-dev/projector/projection"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// ReasonTooLarge dead-letters an event whose outputs (projection record,
// changelog record of the aggregate state, held-event wrapper, intent
// record, and the side-effect ledger entry an intent can grow into) would
// exceed kafka.maxRecordBytes: it is not applied.
const ReasonTooLarge = "too-large"

// recordOverhead is what a record adds to its key and value in a batch.
const recordOverhead = eos.RecordOverhead

// checkedStep is a guard step whose outputs tooLarge checked, with the
// intents of each of its Changes as the check built them: emitStep produces
// those, so a Change's rules are evaluated once.
type checkedStep struct {
	guard.Step
	// intents holds each Change's intents (indexed as Changes); nil when
	// no rules are configured: then a Change's intents are its Effects.
	intents []changeIntents
}

// changeIntents are an applied Change's side-effect intents: the
// handler's, then the configured rules'.
type changeIntents struct {
	list []projection.Intent
	err  error // the rules failed for some (list holds the others)
}

// tooLarge reports why the step's outputs would exceed the record limit
// ("" when they fit), and at which of its Changes (-1: a state record no
// Change accounts for, such as a held-event wrapper). Per Change it checks
// its projection record and its intent records (keeping the intents it
// built in step.intents); then the staged state records, which are what
// reaches the changelog: the aggregate's record after the step's last
// change (with its inline held event, if any), held events in their
// wrapper. An oversize aggregate record is laid to the last change, and an
// expiry that leaves that change out retries with the record as it stood
// before it.
func (p *Processor) tooLarge(g *guard.Guard, step *checkedStep, kv *staging.Overlay) (string, int) {
	limit := p.cfg.MaxRecordBytes
	step.intents = nil
	for i := range step.Changes {
		c := &step.Changes[i]
		ev := c.Event
		// An upper bound first (escaping at most sextuples a string); the
		// record is built only when the bound exceeds the limit.
		bound := recordOverhead + 2*len(ev.AggregateID) + projectionRecordText + len(c.State) +
			6*(len(g.P.Name)+len(ev.AggregateID)+len(ev.AggregateType)+len(ev.EventID)+len(ev.EventType)+len(ev.OccurredAt))
		if bound > limit {
			r := projectionRecord(g.P, *c)
			if n := len(r.Key) + len(r.Value) + recordOverhead; n > limit {
				return fmt.Sprintf("the projection record of version %d would be %d bytes, over kafka.maxRecordBytes %d", c.Version, n, limit), i
			}
		}
		intents := c.Effects
		if p.cfg.EffectRules != nil {
			if step.intents == nil {
				step.intents = make([]changeIntents, len(step.Changes))
			}
			more, err := p.cfg.EffectRules.Intents(g.P.Name, c.Event, c.Version)
			intents = append(c.Effects, more...)
			step.intents[i] = changeIntents{list: intents, err: err}
		}
		if p.cfg.Mode == Rebuild {
			continue // no intent records: emitIntents counts them suppressed
		}
		for _, in := range intents {
			if msg := p.intentTooLarge(g, c, in); msg != "" {
				return msg, i
			}
		}
	}
	for _, w := range kv.Writes() {
		if n := len(w.Key) + len(w.Val) + recordOverhead; !w.Deleted && n > limit {
			return fmt.Sprintf("the event's state record (changelog, or held-event wrapper) would be %d bytes, over kafka.maxRecordBytes %d", n, limit), len(step.Changes) - 1
		}
	}
	return "", -1
}

// intentTooLarge says why intent in of change c cannot be produced ("" when
// it can): its record would exceed the record limit, or the ledger entry
// the executor makes of it could outgrow the limit once it carries its
// attempt history (effect.MaxRecordBytes). The executor could never write
// that entry's changelog record, and would stop at every restart (issue
// 22); refused here, the event is dead-lettered too-large instead.
func (p *Processor) intentTooLarge(g *guard.Guard, c *guard.Change, in projection.Intent) string {
	limit := p.cfg.MaxRecordBytes
	ev := c.Event
	// An upper bound of the value's length first (escaping at most
	// sextuples a string): the value copies the whole event, so it is
	// built only when a bound exceeds the limit (and emitIntents builds it
	// again for the record it produces).
	n := 160 + len(c.Source.Value) + 20 + 6*(len(in.Key)+len(in.Effect)+len(g.P.Name)+len(ev.AggregateID)+len(ev.EventID))
	record := func() int { return len(in.Key) + n + recordOverhead }
	ledger := func() int { return effect.MaxRecordBytes(in.Key, in.Effect, n) + recordOverhead }
	if record() <= limit && ledger() <= limit {
		return ""
	}
	n = len(effect.IntentValue(in, g.P.Name, ev, c.Version, c.Source.Value))
	if r := record(); r > limit {
		return fmt.Sprintf("the side-effect intent %s of version %d would be %d bytes, over kafka.maxRecordBytes %d", in.Effect, c.Version, r, limit)
	}
	if l := ledger(); l > limit {
		return fmt.Sprintf("the side-effect intent %s of version %d would make a ledger entry that can grow to %d bytes (with %d attempts of history), over kafka.maxRecordBytes %d",
			in.Effect, c.Version, l, effect.MaxHistory, limit)
	}
	return ""
}

// offer is Guard.Offer through a staging overlay: a step whose outputs would
// exceed the record limit is discarded (the guard stays where it was, so
// the aggregate's later versions are held behind the missing one) and
// tooBig says why.
func (p *Processor) offer(b *eos.Batch, ts *taskState, g *guard.Guard, ev *envelope.Event, src guard.Source) (step checkedStep, tooBig string, err error) {
	bs := ts.batchOf(b)
	kv := bs.stage(b)
	step.Step, err = g.Offer(kv, ts.task.Prefix, ev, src, b.Now)
	if err != nil {
		return step, "", err
	}
	msg, _ := p.tooLarge(g, &step, kv)
	if msg != "" && len(step.Changes) > 1 {
		// Held events drained after the offered one, and one of them is
		// too large: apply the offered event alone, leaving them held (they
		// wait under the gap policy).
		kv = bs.stage(b)
		if step.Step, err = g.OfferHoldingBack(kv, ts.task.Prefix, ev, src, b.Now); err != nil {
			return step, "", err
		}
		if msg2, _ := p.tooLarge(g, &step, kv); msg2 == "" {
			p.cfg.Logger.Warn("held events left held: draining them would exceed kafka.maxRecordBytes",
				"projection", g.P.Name, "aggregate", ev.AggregateID, "version", ev.AggregateVersion, "why", msg)
			msg = ""
		} else {
			msg = msg2
		}
	}
	if msg != "" {
		return checkedStep{}, msg, nil
	}
	kv.Flush()
	return step, "", nil
}

// expireStep is Guard.Expire through a staging overlay, as offer is for
// Offer. Under skip, a held event whose outputs would exceed the record
// limit is not applied: the skip ends in front of it, it leaves the held
// events and is returned (with why) to be dead-lettered too-large, and the
// versions after it wait behind it under the gap policy – so an oversized
// held event can neither abort the transaction nor stop the expiry.
func (p *Processor) expireStep(b *eos.Batch, ts *taskState, g *guard.Guard, aggregate string, pol projection.Policy, hold time.Duration) (step checkedStep, dropped *guard.Change, why string, err error) {
	bs := ts.batchOf(b)
	var stop int64
	for {
		kv := bs.stage(b)
		step.Step, err = g.ExpireBefore(kv, ts.task.Prefix, aggregate, pol, b.Now, hold, stop)
		if err != nil {
			return step, nil, "", err
		}
		msg, at := p.tooLarge(g, &step, kv)
		if msg == "" {
			kv.Flush()
			return step, dropped, why, nil
		}
		if at < 0 || (stop != 0 && step.Changes[at].Version >= stop) {
			// Nothing left to leave out: a bug in the bounds above, not
			// input; fail the transaction rather than emit a record the
			// broker refuses.
			return step, nil, "", fmt.Errorf("projection %s, aggregate %q: gap expiry: %s", g.P.Name, aggregate, msg)
		}
		c := step.Changes[at]
		dropped, why, stop = &c, msg, c.Version
	}
}
