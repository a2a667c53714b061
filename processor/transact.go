package processor

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/envelope"
	"github.com/projector-dev/projector/internal/eos"
	"github.com/projector-dev/projector/internal/receipt"
	"github.com/projector-dev/projector/internal/state"
	"github.com/projector-dev/projector/projection"
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

// process handles one input record.
func (p *Processor) process(b *eos.Batch, t *eos.Task, r *kgo.Record) error {
	tl := p.tallyOf(b)
	var origin []byte // the ingress header: this record wants a receipt
	for _, h := range r.Headers {
		if h.Key == HeaderCommand {
			return p.command(b, t, r)
		}
		if h.Key == receipt.Header {
			origin = h.Value
		}
	}
	var ev envelope.Event
	if err := envelope.DecodeInto(r.Value, p.cfg.MaxRecordBytes, &ev); err != nil {
		reason, msg := "invalid:value", err.Error()
		var ee *envelope.Error
		if errors.As(err, &ee) {
			reason = ee.Reason()
		}
		p.deadLetter(b, t.ID, r.Offset, r.Key, r.Value, reason, msg)
		tl.add("", "invalid")
		if origin != nil {
			p.receipt(b, r, origin, &receipt.Receipt{Outcome: "invalid", Reason: reason})
		}
		return nil
	}
	var arr [4]*projection.Guard // matched guards, usually one: no allocation
	matched := arr[:0]
	for _, g := range p.guards {
		if g.P.Accepts(ev.AggregateType) {
			matched = append(matched, g)
		}
	}
	fp := ev.Fingerprint()
	id := dedup.MakeID(ev.TenantID, ev.EventID)
	ts := t.Data.(*taskState)
	verdict, err := p.cfg.Dedup.Check(b.Txn, ts.filter, ts.recent, t.Prefix, id, fp, b.Now)
	if err != nil {
		return err
	}
	switch verdict {
	case dedup.Duplicate:
		tl.addAll(matched, "duplicate")
		return nil
	case dedup.Conflict:
		p.deadLetter(b, t.ID, r.Offset, r.Key, r.Value, ReasonConflict,
			fmt.Sprintf("event %q was seen before with a different fingerprint", ev.EventID))
		tl.addAll(matched, "conflict")
		return nil
	}
	// An event without aggregateVersion is rejected by each versioned
	// projection it matches (one dead letter for the record, naming them)
	// and applied by the unversioned ones: the version is required per
	// projection, so a rebuild of either kind alone does what live does for
	// it. The dedup mark does not depend on the projections: a redelivery is
	// a duplicate for all of them, live and in a rebuild.
	var rejected []string
	if ev.AggregateVersion == 0 {
		offer := matched[:0:0]
		for _, g := range matched {
			if g.P.Versioned {
				rejected = append(rejected, g.P.Name)
				tl.add(g.P.Name, "invalid")
			} else {
				offer = append(offer, g)
			}
		}
		if rejected != nil {
			p.deadLetter(b, t.ID, r.Offset, r.Key, r.Value, "invalid:aggregateVersion",
				"envelope: invalid aggregateVersion: required by versioned projection "+strings.Join(rejected, ", "))
			matched = offer
		}
	}
	p.cfg.Dedup.Mark(b.Txn, ts.filter, &tl.seg, t.Prefix, r.Offset, id, fp, b.Now)
	// The receipt of an ingested event is written only here, where the
	// event id is new: a duplicate or a conflict returned above leaves the
	// first committed receipt (and its fingerprint) standing.
	var rc *receipt.Receipt
	if origin != nil && p.receipts() {
		rc = &receipt.Receipt{EventID: ev.EventID, Fingerprint: hex.EncodeToString(fp[:])}
		defer p.receipt(b, r, origin, rc)
		for _, name := range rejected {
			rc.Set(name, "invalid")
			rc.Reason = "invalid:aggregateVersion"
		}
	}
	if len(matched) == 0 {
		if rejected == nil {
			tl.add("", "filtered") // no projection takes this aggregate type
			if rc != nil {
				rc.Outcome = "filtered"
			}
		}
		return nil
	}
	src := projection.Source{Offset: r.Offset, Key: r.Key, Value: r.Value}
	var tooLarge []string // "projection p: why", one dead letter for the record naming them
	for _, g := range matched {
		step, tooBig, err := p.offer(b, t, g, &ev, src)
		if err != nil {
			return err
		}
		if tooBig != "" {
			tooLarge = append(tooLarge, "projection "+g.P.Name+": "+tooBig)
			tl.add(g.P.Name, ReasonTooLarge)
			rc.Set(g.P.Name, ReasonTooLarge)
			continue
		}
		tl.add(g.P.Name, outcomeLabel(step.Outcome))
		rc.Set(g.P.Name, outcomeLabel(step.Outcome))
		if n := len(step.Changes); step.Outcome == projection.Applied && n > 1 {
			tl.addN(g.P.Name, "applied", n-1) // drained held events
		} else if step.Outcome != projection.Applied && n > 0 {
			tl.addN(g.P.Name, "applied", n)
		}
		p.emitStep(b, t, g, ev.AggregateID, step)
	}
	if tooLarge != nil {
		p.deadLetter(b, t.ID, r.Offset, r.Key, r.Value, ReasonTooLarge, strings.Join(tooLarge, "; "))
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
func (p *Processor) emitStep(b *eos.Batch, t *eos.Task, g *projection.Guard, aggregate string, step projection.Step) {
	for _, c := range step.Changes {
		b.Produce(projectionRecord(g.P, c))
		p.emitIntents(b, t, g.P, c)
	}
	for _, f := range step.Failures {
		p.deadLetter(b, t.ID, f.Source.Offset, f.Source.Key, f.Source.Value, ReasonHandlerError, f.Err.Error())
	}
	for _, d := range step.Dropped {
		p.deadLetter(b, t.ID, d.Offset, d.Key, d.Value, ReasonGapTimeout, "held event dropped: gap not filled (or held limit reached)")
	}
	// A gap opens, moves or closes only on an aggregate that holds events
	// before or after the step; most steps (in order, nothing held) skip
	// the index.
	if g.P.Versioned && (step.HeldBefore > 0 || step.HeldCount > 0) {
		p.trackGap(b, gapKey{g.P.Name, aggregate}, step)
	}
}

// trackGap records the aggregate's gap state for the task's gap index (b is
// the task's batch), applied once the transaction commits (tally.committed).
func (p *Processor) trackGap(b *eos.Batch, k gapKey, step projection.Step) {
	tl := p.tallyOf(b)
	c := gapChange{key: k}
	if step.HeldCount > 0 {
		c.since = step.HeldSince
	}
	tl.gaps = append(tl.gaps, c)
}

func (p *Processor) deadLetter(b *eos.Batch, id state.Task, offset int64, key, value []byte, reason, msg string) {
	b.DeadLetter(id, offset, key, value, reason, msg)
	p.tallyOf(b).deadLetter(reason)
}

// tallyOf is the batch's tally, applied and published when the transaction
// commits. Each task has its own batch, so tasks processed concurrently
// never share one.
func (p *Processor) tallyOf(b *eos.Batch) *tally {
	if tl, ok := b.Data.(*tally); ok {
		return tl
	}
	tl := newTally()
	if t := b.Task(); t != nil {
		tl.ts, _ = t.Data.(*taskState)
	}
	b.Data = tl
	b.OnCommit(tl.committed)
	b.OnCommitted(func() { p.stats.addTally(tl) })
	return tl
}

// HeaderCommand marks an input record that is an operator command, not an
// event. Commands travel through the input topic (keyed by aggregate id, so
// they reach the partition that holds the aggregate) and are applied by that
// partition's owner inside its transaction, in order with the events.
const HeaderCommand = "projector-command"

// Command is an operator command on the input topic.
type Command struct {
	Op         string `json:"op"`                   // "skip-gap"
	Projection string `json:"projection,omitempty"` // empty: every projection
	Aggregate  string `json:"aggregate"`
	Note       string `json:"note,omitempty"`
}

// command applies an operator command. A command that cannot apply is
// dead-lettered with the reason, so the operator sees why.
func (p *Processor) command(b *eos.Batch, t *eos.Task, r *kgo.Record) error {
	var c Command
	if err := json.Unmarshal(r.Value, &c); err != nil || c.Op != "skip-gap" || c.Aggregate == "" {
		p.deadLetter(b, t.ID, r.Offset, r.Key, r.Value, "invalid:value", fmt.Sprintf("bad operator command %q", eos.Truncate(r.Value, 256)))
		return nil
	}
	skipped := 0
	for _, g := range p.guards {
		if c.Projection != "" && g.P.Name != c.Projection {
			continue
		}
		step, dropped, why, err := p.expireStep(b, t.Prefix, g, c.Aggregate, projection.Skip, 0)
		if err != nil {
			return err
		}
		p.tallyOf(b).addN(g.P.Name, "applied", len(step.Changes))
		p.emitStep(b, t, g, c.Aggregate, step) // updates the gap index when events were held
		p.deadLetterTooLarge(b, t, g, dropped, why)
		skipped += len(step.Changes)
		if dropped != nil {
			skipped++
		}
		if len(step.Changes) > 0 {
			p.cfg.Logger.Info("gap skipped by operator", "projection", g.P.Name, "aggregate", c.Aggregate,
				"from", step.Changes[0].Version, "applied", len(step.Changes), "stillHeld", step.HeldCount, "note", c.Note)
		}
	}
	if skipped == 0 {
		p.deadLetter(b, t.ID, r.Offset, r.Key, r.Value, "invalid:value",
			fmt.Sprintf("skip-gap: aggregate %q holds no events in %s", c.Aggregate, t.ID))
	}
	return nil
}

// receipts reports whether this processor writes ingress receipts.
func (p *Processor) receipts() bool { return p.cfg.Mode == Live && p.cfg.ReceiptsTopic != "" }

// receipt produces the receipt of an ingested record into the batch's
// transaction. A malformed origin header (not written by the ingress) gets
// no receipt: there is no key to file it under.
func (p *Processor) receipt(b *eos.Batch, r *kgo.Record, origin []byte, rc *receipt.Receipt) {
	if !p.receipts() {
		return
	}
	o, err := receipt.ParseOrigin(origin)
	if err != nil {
		p.cfg.Logger.Warn("input record with a malformed ingress header: no receipt written",
			"topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
		return
	}
	rc.Origin = o
	rc.Topic, rc.Partition, rc.Offset = r.Topic, r.Partition, r.Offset
	if rc.Outcome == "" { // no projection takes this aggregate type
		rc.Outcome = "filtered"
	}
	b.Produce(&kgo.Record{Topic: p.cfg.ReceiptsTopic, Key: []byte(receipt.Key(o.TenantID, o.Key, o.Index)), Value: rc.Encode()})
}
