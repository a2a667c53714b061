package processor

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/inputformat"
	"github.com/projector-dev/projector/internal/core/jsonenc"
	"github.com/projector-dev/projector/internal/engine/guard"
	"github.com/projector-dev/projector/projection"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// projectionRecordText bounds a projection record's value beyond its
// variable parts: the member names and punctuation (113 bytes), the quotes
// of six strings (12), the longest version (20 digits) and an empty state
// ("{}").
const projectionRecordText = 113 + 12 + 20 + 2

// projectionRecord encodes a Change as the contract's projection record (a
// tombstone for a deletion). Encoding is by hand: the state is already JSON and
// is embedded as is.
func projectionRecord(p *projection.Projection, c guard.Change) *kgo.Record {
	ev := c.Event
	// Key and value share one buffer, sized for both unless names need
	// escaping (then append grows it).
	n := len(ev.AggregateID) + // the key
		projectionRecordText + len(p.Name) + len(ev.AggregateID) + len(ev.AggregateType) +
		len(c.State) + len(ev.EventID) + len(ev.EventType) + len(ev.OccurredAt)
	buf := make([]byte, 0, n)
	buf = append(buf, ev.AggregateID...)
	r := &kgo.Record{Topic: p.Topic, Key: buf[:len(ev.AggregateID):len(ev.AggregateID)], Headers: traceHeaders(c.Source)}
	if c.Deleted {
		return r
	}
	b := buf[len(buf):]
	b = appendMember(b, `{"projection":`, p.Name)
	b = appendMember(b, `,"aggregateId":`, ev.AggregateID)
	if ev.AggregateType != "" {
		b = appendMember(b, `,"aggregateType":`, ev.AggregateType)
	}
	b = append(b, `,"version":`...)
	b = strconv.AppendInt(b, c.Version, 10)
	b = append(b, `,"state":`...)
	if len(c.State) == 0 {
		b = append(b, "{}"...)
	} else {
		b = append(b, c.State...)
	}
	b = appendMember(b, `,"lastEventId":`, ev.EventID)
	b = appendMember(b, `,"lastEventType":`, ev.EventType)
	if ev.OccurredAt != "" {
		b = appendMember(b, `,"occurredAt":`, ev.OccurredAt)
	}
	b = append(b, '}')
	r.Value = b
	return r
}

// appendMember appends a JSON member whose value is the string v; member is
// its name with the punctuation before and after it (`,"name":`).
func appendMember(b []byte, member, v string) []byte {
	return jsonenc.AppendString(append(b, member...), v)
}

// emitIntents produces the side-effect intents of an applied event — the
// handler's and the configured rules', fx (checkedStep.intents) — in live
// mode, or counts them as suppressed in rebuild mode
// (docs/design.md#effects-only-from-applied,
// docs/design.md#no-effects-in-rebuild). Intents are only ever built from
// Changes, that is from applied events.
func (p *Processor) emitIntents(b *eos.Batch, ts *taskState, pr *projection.Projection, c guard.Change, fx changeIntents) {
	if fx.err != nil {
		p.deadLetter(b, ts, c.Source.Offset, c.Source.Key, c.Source.Value, ReasonHandlerError,
			"event applied, but a side effect could not be built: "+fx.err.Error())
	}
	for _, in := range fx.list {
		if p.cfg.Mode == Rebuild {
			ts.batchOf(b).counts.effect(in.Effect, IntentSuppressed)
			continue
		}
		v := effect.IntentValue(in, pr.Name, c.Event, c.Version, c.Source.Value)
		b.Produce(&kgo.Record{Topic: p.cfg.EffectsTopic, Key: []byte(in.Key), Value: v, Headers: traceHeaders(c.Source)})
		ts.batchOf(b).counts.effect(in.Effect, IntentEnqueued)
	}
}

// traceHeaders are the traceparent and tracestate headers of an output of
// the event of src: the W3C trace context its record carried
// (docs/contract.md#trace-context); nil, with no allocation, when it
// carried none. The values alias the input record (or the held wrapper it
// drained from), which outlives the transaction's produce.
func traceHeaders(src guard.Source) []kgo.RecordHeader {
	return inputformat.TraceContext{Parent: src.TraceParent, State: src.TraceState}.Headers(nil)
}
