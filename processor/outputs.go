package processor

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/eos"
	"github.com/projector-dev/projector/projection"
)

// projectionRecord encodes a Change as the contract's projection record (a
// tombstone for a deletion). Encoding is by hand: the state is already JSON and
// is embedded as is.
func projectionRecord(p *projection.Projection, c projection.Change) *kgo.Record {
	r := &kgo.Record{Topic: p.Topic, Key: []byte(c.Event.AggregateID)}
	if c.Deleted {
		return r
	}
	ev := c.Event
	b := make([]byte, 0, 160+len(c.State)+len(ev.AggregateID))
	b = append(b, `{"projection":`...)
	b = strconv.AppendQuote(b, p.Name)
	b = append(b, `,"aggregateId":`...)
	b = appendJSONString(b, ev.AggregateID)
	if ev.AggregateType != "" {
		b = append(b, `,"aggregateType":`...)
		b = appendJSONString(b, ev.AggregateType)
	}
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, c.Version, 10)
	b = append(b, `,"state":`...)
	if len(c.State) == 0 {
		b = append(b, "{}"...)
	} else {
		b = append(b, c.State...)
	}
	b = append(b, `,"lastEventId":`...)
	b = appendJSONString(b, ev.EventID)
	b = append(b, `,"lastEventType":`...)
	b = appendJSONString(b, ev.EventType)
	if ev.OccurredAt != "" {
		b = append(b, `,"occurredAt":`...)
		b = appendJSONString(b, ev.OccurredAt)
	}
	b = append(b, '}')
	r.Value = b
	return r
}

// emitIntents produces the side-effect intents of an applied event (live mode)
// or counts them as suppressed (rebuild mode).
func (p *Processor) emitIntents(b *eos.Batch, pr *projection.Projection, c projection.Change) {
	for _, in := range c.Effects {
		if p.cfg.Mode == Rebuild {
			p.tally.effect(in.Effect, "suppressed")
			continue
		}
		ev := c.Event
		v := make([]byte, 0, 256+len(c.Source.Value))
		v = append(v, `{"key":`...)
		v = appendJSONString(v, in.Key)
		v = append(v, `,"effect":`...)
		v = appendJSONString(v, in.Effect)
		v = append(v, `,"projection":`...)
		v = appendJSONString(v, pr.Name)
		v = append(v, `,"aggregateId":`...)
		v = appendJSONString(v, ev.AggregateID)
		v = append(v, `,"aggregateVersion":`...)
		v = strconv.AppendInt(v, c.Version, 10)
		v = append(v, `,"eventId":`...)
		v = appendJSONString(v, ev.EventID)
		v = append(v, `,"event":`...)
		v = append(v, c.Source.Value...)
		v = append(v, '}')
		b.Produce(&kgo.Record{Topic: p.cfg.EffectsTopic, Key: []byte(in.Key), Value: v})
		p.tally.effect(in.Effect, "enqueued")
	}
}

// appendJSONString appends s as a JSON string. Ids and types are validated
// UTF-8, so only quotes, backslashes and control characters need escaping.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// expiry is one aggregate whose gap outlived the hold timeout.
type expiry struct {
	task *eos.Task
	key  gapKey
}

// expiring lists the gaps to resolve now (none under the wait policy; those
// are only reported).
func (p *Processor) expiring(now time.Time) []expiry {
	if p.cfg.GapPolicy == projection.Wait {
		return nil
	}
	var out []expiry
	p.loop.Tasks(func(t *eos.Task) {
		ts, _ := t.Data.(*taskState)
		if ts == nil {
			return
		}
		for k, since := range ts.gaps {
			if now.Sub(since) >= p.cfg.HoldTimeout {
				out = append(out, expiry{task: t, key: k})
			}
		}
	})
	return out
}

// expire resolves one expired gap inside the transaction.
func (p *Processor) expire(b *eos.Batch, e expiry) error {
	for _, g := range p.guards {
		if g.P.Name != e.key.projection {
			continue
		}
		step, err := g.Expire(b.Txn, e.task.Prefix, e.key.aggregate, p.cfg.GapPolicy, b.Now)
		if err != nil {
			return err
		}
		p.tally.addN(g.P.Name, "applied", len(step.Changes))
		p.emitStep(b, e.task, g, e.key.aggregate, step)
		p.trackGap(b, e.task, e.key, step)
		p.cfg.Logger.Info("gap timed out", "projection", g.P.Name, "aggregate", e.key.aggregate,
			"policy", p.cfg.GapPolicy, "applied", len(step.Changes), "deadLettered", len(step.Dropped))
	}
	return nil
}
