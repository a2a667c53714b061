package processor

import (
	"bytes"
	"fmt"
	"sort"
	"time"

	"github.com/projector-dev/projector/internal/eos"
	"github.com/projector-dev/projector/projection"
	"github.com/projector-dev/projector/sideeffects"
)

// ReasonTooLarge dead-letters an event whose outputs (projection record,
// changelog record of the aggregate state, held-event wrapper, intent
// record) would exceed kafka.maxRecordBytes: it is not applied.
const ReasonTooLarge = "too-large"

// recordOverhead is what a record adds to its key and value in a batch
// (length varints, attributes, deltas, header count) – an upper bound.
const recordOverhead = 64

// stagingKV buffers one Offer's writes over the batch's Txn, so that a step
// whose outputs are too large can be discarded before anything of it is
// staged. Offers write a handful of keys: a slice with linear search.
type stagingKV struct {
	base   projection.KV
	writes []stagedWrite
}

type stagedWrite struct {
	key, val []byte
	deleted  bool
}

func (s *stagingKV) find(key []byte) int {
	for i := len(s.writes) - 1; i >= 0; i-- {
		if bytes.Equal(s.writes[i].key, key) {
			return i
		}
	}
	return -1
}

func (s *stagingKV) Get(key []byte) ([]byte, bool, error) {
	if i := s.find(key); i >= 0 {
		w := s.writes[i]
		return w.val, !w.deleted, nil
	}
	return s.base.Get(key)
}

func (s *stagingKV) put(w stagedWrite) {
	if i := s.find(w.key); i >= 0 {
		s.writes[i] = w
		return
	}
	s.writes = append(s.writes, w)
}

func (s *stagingKV) Set(key, val []byte) { s.put(stagedWrite{key: key, val: val}) }
func (s *stagingKV) Delete(key []byte)   { s.put(stagedWrite{key: key, deleted: true}) }

// Scan merges the staged writes into the base's view.
func (s *stagingKV) Scan(prefix []byte, fn func(key, value []byte) error) error {
	var mine []stagedWrite
	for _, w := range s.writes {
		if bytes.HasPrefix(w.key, prefix) {
			mine = append(mine, w)
		}
	}
	if len(mine) == 0 {
		return s.base.Scan(prefix, fn)
	}
	type kv struct{ k, v []byte }
	var all []kv
	if err := s.base.Scan(prefix, func(k, v []byte) error {
		all = append(all, kv{bytes.Clone(k), bytes.Clone(v)})
		return nil
	}); err != nil {
		return err
	}
	for _, w := range mine {
		i := sort.Search(len(all), func(i int) bool { return bytes.Compare(all[i].k, w.key) >= 0 })
		found := i < len(all) && bytes.Equal(all[i].k, w.key)
		switch {
		case w.deleted && found:
			all = append(all[:i], all[i+1:]...)
		case w.deleted:
		case found:
			all[i].v = w.val
		default:
			all = append(all, kv{})
			copy(all[i+1:], all[i:])
			all[i] = kv{w.key, w.val}
		}
	}
	for _, e := range all {
		if err := fn(e.k, e.v); err != nil {
			return err
		}
	}
	return nil
}

// flush stages the buffered writes in the batch's Txn.
func (s *stagingKV) flush() {
	for _, w := range s.writes {
		if w.deleted {
			s.base.Delete(w.key)
		} else {
			s.base.Set(w.key, w.val)
		}
	}
	s.writes = s.writes[:0]
}

// aggHeaderBound bounds an aggregate state record's bytes before its
// document (format, version, deleted flag, held count and since).
const aggHeaderBound = 32

// tooLarge reports why the step's outputs would exceed the record limit
// ("" when they fit), and at which of its Changes (-1: a state record no
// Change accounts for, such as a held-event wrapper). Per Change it checks
// the aggregate's state record after it (a changelog record), its
// projection record and its intent records; then the staged state records
// (held events are stored in their wrapper).
func (p *Processor) tooLarge(g *projection.Guard, step *projection.Step, kv *stagingKV, aggKeyLen int) (string, int) {
	limit := p.cfg.MaxRecordBytes
	for i := range step.Changes {
		c := &step.Changes[i]
		ev := c.Event
		if n := aggKeyLen + aggHeaderBound + len(c.State) + recordOverhead; n > limit {
			return fmt.Sprintf("the aggregate's state record after version %d would be about %d bytes, over kafka.maxRecordBytes %d", c.Version, n, limit), i
		}
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
		if p.cfg.Mode == Rebuild {
			continue
		}
		intents := c.Effects
		if p.cfg.EffectRules != nil {
			more, _ := p.cfg.EffectRules.Intents(g.P.Name, c.Event, c.Version)
			intents = append(intents, more...)
		}
		for _, in := range intents {
			// The same upper bound first: the value copies the whole event,
			// and emitIntents builds it again for the record it produces.
			bound := recordOverhead + len(in.Key) + 160 + len(c.Source.Value) + 20 +
				6*(len(in.Key)+len(in.Effect)+len(g.P.Name)+len(ev.AggregateID)+len(ev.EventID))
			if bound <= limit {
				continue
			}
			v := sideeffects.IntentValue(in, g.P.Name, c.Event, c.Version, c.Source.Value)
			if n := len(in.Key) + len(v) + recordOverhead; n > limit {
				return fmt.Sprintf("the side-effect intent %s of version %d would be %d bytes, over kafka.maxRecordBytes %d", in.Effect, c.Version, n, limit), i
			}
		}
	}
	for _, w := range kv.writes {
		if n := len(w.key) + len(w.val) + recordOverhead; !w.deleted && n > limit {
			return fmt.Sprintf("the event's state record (changelog, or held-event wrapper) would be %d bytes, over kafka.maxRecordBytes %d", n, limit), len(step.Changes) - 1
		}
	}
	return "", -1
}

// offer is Guard.Offer through a staging overlay: a step whose outputs would
// exceed the record limit is discarded (the guard stays where it was, so
// the aggregate's later versions are held behind the missing one) and
// tooBig says why.
func (p *Processor) offer(b *eos.Batch, t *eos.Task, g *projection.Guard, ev *projection.Event, src projection.Source) (step projection.Step, tooBig string, err error) {
	kv := &stagingKV{base: b.Txn}
	step, err = g.Offer(kv, t.Prefix, ev, src, b.Now)
	if err != nil {
		return step, "", err
	}
	aggKeyLen := len(projection.AggregateKey(t.Prefix, g.P.Name, ev.AggregateID))
	msg, _ := p.tooLarge(g, &step, kv, aggKeyLen)
	if msg != "" && len(step.Changes) > 1 {
		// Held events drained after the offered one, and one of them is
		// too large: apply the offered event alone, leaving them held (they
		// wait under the gap policy).
		kv = &stagingKV{base: b.Txn}
		if step, err = g.OfferHoldingBack(kv, t.Prefix, ev, src, b.Now); err != nil {
			return step, "", err
		}
		if msg2, _ := p.tooLarge(g, &step, kv, aggKeyLen); msg2 == "" {
			p.cfg.Logger.Warn("held events left held: draining them would exceed kafka.maxRecordBytes",
				"projection", g.P.Name, "aggregate", ev.AggregateID, "version", ev.AggregateVersion, "why", msg)
			msg = ""
		} else {
			msg = msg2
		}
	}
	if msg != "" {
		return projection.Step{}, msg, nil
	}
	kv.flush()
	return step, "", nil
}

// expireStep is Guard.Expire through a staging overlay, as offer is for
// Offer. Under skip, a held event whose outputs would exceed the record
// limit is not applied: the skip ends in front of it, it leaves the held
// events and is returned (with why) to be dead-lettered too-large, and the
// versions after it wait behind it under the gap policy – so an oversized
// held event can neither abort the transaction nor stop the expiry.
func (p *Processor) expireStep(b *eos.Batch, prefix []byte, g *projection.Guard, aggregate string, pol projection.Policy, hold time.Duration) (step projection.Step, dropped *projection.Change, why string, err error) {
	aggKeyLen := len(projection.AggregateKey(prefix, g.P.Name, aggregate))
	var stop int64
	for {
		kv := &stagingKV{base: b.Txn}
		step, err = g.ExpireBefore(kv, prefix, aggregate, pol, b.Now, hold, stop)
		if err != nil {
			return step, nil, "", err
		}
		msg, at := p.tooLarge(g, &step, kv, aggKeyLen)
		if msg == "" {
			kv.flush()
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
