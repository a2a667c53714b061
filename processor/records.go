package processor

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/core/command"
	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/inputformat"
	"github.com/projector-dev/projector/internal/core/receipt"
	"github.com/projector-dev/projector/internal/engine/guard"
)

// Dead-letter reasons (header projector-reason).
const (
	ReasonConflict     = "conflict"
	ReasonGapTimeout   = "gap-timeout"
	ReasonHandlerError = "handler-error"
	HeaderReason       = eos.HeaderReason
	HeaderError        = eos.HeaderError
	HeaderSource       = eos.HeaderSource
)

// process handles one input record: an operator command (applyCommand), or
// an event, in this order: decode (an invalid record is dead-lettered),
// dedup (a duplicate or a conflict stops here), the versioned projections'
// check of aggregateVersion, the dedup mark, then one guard step per
// projection that takes the aggregate type. An event that came through the
// ingress gets its receipt once its outcome is known. Whatever the record
// holds ends in an outcome or a dead letter; the errors it returns are
// failures of the task's own state (dedup.Check, the guards' reads and
// writes: Pebble, or a stored record that does not decode), which stop the
// loop (docs/design.md#nothing-dropped-silently).
func (p *Processor) process(b *eos.Batch, ts *taskState, r *kgo.Record) error {
	bs := ts.batchOf(b)
	var origin []byte  // the ingress header: this record wants a receipt
	var tp, tst []byte // the W3C trace context headers, read in the same pass
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderCommand:
			return p.applyCommand(b, ts, r)
		case receipt.Header:
			origin = h.Value
		case inputformat.HeaderTraceParent:
			tp = h.Value
		case inputformat.HeaderTraceState:
			tst = h.Value
		}
	}
	// The event envelope: the record value, or what the topic's decoder
	// made of it (inputs.go). res stays zero for an envelope topic.
	var res inputformat.Result
	value := r.Value
	if d := ts.decoder; d != nil {
		if err := d.Decode(p.runCtx, r, nil, &res); err != nil {
			if errors.Is(err, inputformat.ErrUnavailable) || p.runCtx.Err() != nil {
				// It might decode later: never a dead letter.
				return &eos.HoldError{Reason: "the Schema Registry is unavailable (input " + r.Topic + ")", Err: err}
			}
			p.rejectInvalid(b, ts, r, origin, err)
			return nil
		}
		value = res.Value
	} else if tp != nil {
		// An envelope topic has no decoder (the fast path): its trace
		// context is the headers', validated; nothing to do without one.
		res.Trace = inputformat.ParseTrace(tp, tst)
	}
	if bs.trace != nil {
		bs.trace.note(res.Trace) // the transaction span's parent and links
	}
	var ev envelope.Event
	fp, err := envelope.DecodeFingerprint(value, p.cfg.MaxRecordBytes, &ev) // one walk of the payload for both
	if err != nil {
		p.rejectInvalid(b, ts, r, origin, err)
		return nil
	}
	var arr [4]*guard.Guard // matched guards, usually one: no allocation
	matched := arr[:0]
	for _, g := range p.guards {
		if g.P.Accepts(ev.AggregateType) {
			matched = append(matched, g)
		}
	}
	id := dedup.MakeID(ev.TenantID, res.DedupEventID(ev.EventID))
	verdict, err := bs.ts.dedup.Check(b.Txn, id, fp, b.Now)
	if err != nil {
		return err
	}
	switch verdict {
	case dedup.Duplicate:
		bs.counts.addAll(matched, OutcomeDuplicate)
		return nil
	case dedup.Conflict:
		p.deadLetterRecord(b, ts, r, ReasonConflict,
			fmt.Sprintf("event %q was seen before with a different fingerprint", ev.EventID))
		bs.counts.addAll(matched, OutcomeConflict)
		return nil
	}
	var rejected []string
	if ev.AggregateVersion == 0 {
		matched, rejected = p.rejectUnversioned(b, ts, r, matched)
	}
	bs.ts.dedup.Mark(b.Txn, &bs.marks, r.Offset, id, fp, b.Now)
	// The receipt of an ingested event is written only here, where the
	// event id is new: a duplicate or a conflict returned above leaves the
	// first committed receipt (and its fingerprint) standing.
	var rc *receipt.Receipt
	if origin != nil && p.receipts() {
		rc = &receipt.Receipt{EventID: ev.EventID, Fingerprint: hex.EncodeToString(fp[:])}
		defer p.receipt(b, r, origin, rc)
		for _, name := range rejected {
			rc.Set(name, "invalid")
			rc.Reason = reasonNoVersion
		}
	}
	if len(matched) == 0 {
		if rejected == nil {
			bs.counts.add("", OutcomeFiltered) // no projection takes this aggregate type
			if rc != nil {
				rc.Outcome = "filtered"
			}
		}
		return nil
	}
	return p.offerAll(b, ts, r, value, res.Trace, &ev, matched, rc)
}

// reasonNoVersion dead-letters an event without aggregateVersion that a
// versioned projection takes.
const reasonNoVersion = "invalid:aggregateVersion"

// rejectInvalid dead-letters a record that is not a valid envelope, with
// the envelope's reason (invalid:<field>, or invalid:value when it is not
// even JSON), and files its receipt when it came through the ingress.
func (p *Processor) rejectInvalid(b *eos.Batch, ts *taskState, r *kgo.Record, origin []byte, err error) {
	reason, msg := command.ReasonInvalidValue, err.Error()
	var ee *envelope.Error
	if errors.As(err, &ee) {
		reason = ee.Reason()
	}
	p.deadLetterRecord(b, ts, r, reason, msg)
	ts.batchOf(b).counts.add("", OutcomeInvalid)
	if origin != nil {
		p.receipt(b, r, origin, &receipt.Receipt{Outcome: "invalid", Reason: reason})
	}
}

// rejectUnversioned handles an event without aggregateVersion: it is
// rejected by each versioned projection it matches (one dead letter for the
// record, naming them) and applied by the unversioned ones, which it
// returns with the names of the rejecting projections. The version is
// required per projection, so a rebuild of either kind alone does what live
// does for it. The dedup mark does not depend on the projections: a
// redelivery is a duplicate for all of them, live and in a rebuild.
func (p *Processor) rejectUnversioned(b *eos.Batch, ts *taskState, r *kgo.Record, matched []*guard.Guard) (offer []*guard.Guard, rejected []string) {
	bs := ts.batchOf(b)
	offer = matched[:0:0]
	for _, g := range matched {
		if g.P.Versioned {
			rejected = append(rejected, g.P.Name)
			bs.counts.add(g.P.Name, OutcomeInvalid)
		} else {
			offer = append(offer, g)
		}
	}
	if rejected == nil {
		return matched, nil
	}
	p.deadLetterRecord(b, ts, r, reasonNoVersion,
		"envelope: invalid aggregateVersion: required by versioned projection "+strings.Join(rejected, ", "))
	return offer, rejected
}

// offerAll offers a new event to each matched projection's guard, emits
// each step's outputs and tallies the outcomes (into rc too, when the event
// wants a receipt). A step whose outputs would exceed the record limit is
// discarded; the record gets one too-large dead letter naming them all.
//
// The source kept with a held event, and embedded in its intents, is the
// envelope (value), not the record's own value when the topic has another
// format: a held event drains by decoding its envelope again, without the
// topic's decoder or its Schema Registry. The trace context goes with it
// (the held wrapper stores it), and onto every output of the event.
func (p *Processor) offerAll(b *eos.Batch, ts *taskState, r *kgo.Record, value []byte, tc inputformat.TraceContext, ev *envelope.Event, matched []*guard.Guard, rc *receipt.Receipt) error {
	bs := ts.batchOf(b)
	src := guard.Source{Offset: r.Offset, Key: r.Key, Value: value, TraceParent: tc.Parent, TraceState: tc.State}
	var tooLarge []string // "projection p: why"
	for _, g := range matched {
		step, tooBig, err := p.offer(b, ts, g, ev, src)
		if err != nil {
			return err
		}
		if tooBig != "" {
			tooLarge = append(tooLarge, "projection "+g.P.Name+": "+tooBig)
			bs.counts.add(g.P.Name, OutcomeTooLarge)
			rc.Set(g.P.Name, ReasonTooLarge)
			continue
		}
		bs.counts.add(g.P.Name, outcomeLabel(step.Outcome))
		rc.Set(g.P.Name, outcomeLabel(step.Outcome).String())
		drained := len(step.Changes) // the held events applied after it, counted applied
		if step.Outcome == guard.Applied {
			drained-- // the offered event, counted above
		}
		bs.counts.addN(g.P.Name, OutcomeApplied, drained)
		p.emitStep(b, ts, g, ev.AggregateID, step)
	}
	if tooLarge != nil {
		p.deadLetterRecord(b, ts, r, ReasonTooLarge, strings.Join(tooLarge, "; "))
	}
	return nil
}

// outcomeLabel is a guard step's outcome as the outcome label of the events
// counter and the receipt.
func outcomeLabel(o guard.Outcome) Outcome {
	switch o {
	case guard.Applied:
		return OutcomeApplied
	case guard.Stale:
		return OutcomeStale
	case guard.Held:
		return OutcomeHeld
	default: // Failed, Overflow: dead-lettered with the reason
		return OutcomeFailed
	}
}

// emitStep turns a guard step into output records and gap-index updates.
func (p *Processor) emitStep(b *eos.Batch, ts *taskState, g *guard.Guard, aggregate string, step checkedStep) {
	for i, c := range step.Changes {
		b.Produce(projectionRecord(g.P, c))
		fx := changeIntents{list: c.Effects} // the handler's alone: no rules
		if step.intents != nil {
			fx = step.intents[i] // the handler's and the rules', built by the size check
		}
		p.emitIntents(b, ts, g.P, c, fx)
	}
	for _, f := range step.Failures {
		p.deadLetter(b, ts, f.Source.Offset, f.Source.Key, f.Source.Value, ReasonHandlerError, f.Err.Error())
	}
	for _, d := range step.Dropped {
		p.deadLetter(b, ts, d.Offset, d.Key, d.Value, ReasonGapTimeout, "held event dropped: gap not filled (or held limit reached)")
	}
	// A gap opens, moves or closes only on an aggregate that holds events
	// before or after the step; most steps (in order, nothing held) skip
	// the index.
	if g.P.Versioned && (step.HeldBefore > 0 || step.HeldCount > 0) {
		ts.trackGap(b, gapKey{g.P.Name, aggregate}, step.Step)
	}
}

// deadLetterRecord dead-letters input record r itself, with its headers
// (eos.Batch.DeadLetterWithHeaders): a record of a format whose attributes
// travel in headers stays readable from its dead letter.
func (p *Processor) deadLetterRecord(b *eos.Batch, ts *taskState, r *kgo.Record, reason, msg string) {
	b.DeadLetterWithHeaders(ts.task.ID, r.Offset, r.Key, r.Value, r.Headers, reason, msg)
	ts.batchOf(b).counts.deadLetter(reason)
}

// deadLetter dead-letters a record of task ts in the batch's transaction
// and counts it under its reason when the transaction commits.
func (p *Processor) deadLetter(b *eos.Batch, ts *taskState, offset int64, key, value []byte, reason, msg string) {
	b.DeadLetter(ts.task.ID, offset, key, value, reason, msg)
	ts.batchOf(b).counts.deadLetter(reason)
}
