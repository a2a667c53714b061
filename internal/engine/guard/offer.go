package guard

import (
	"bytes"
	"fmt"
	"sync"
	"time"

	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/internal/core/jsonmerge"
	"github.com/projector-dev/projector/projection"
)

// offerScratch is what an Offer allocates for itself, in one piece: the
// aggregate key and the backing array of Step.Changes for the usual single
// change. (Neither is ever written again once used: KV implementations may
// keep the key, and the caller owns the step.)
type offerScratch struct {
	changes [1]Change
	key     [offerKeyRoom]byte // longer keys are allocated apart
}

const offerKeyRoom = 80 // 128 + 80 bytes: a 208-byte size class

// Offer presents a new (deduplicated) event to the guard.
func (g *Guard) Offer(kv KV, taskPrefix []byte, ev *envelope.Event, src Source, now time.Time) (Step, error) {
	return g.offer(kv, taskPrefix, ev, src, now, true)
}

// OfferHoldingBack is Offer that drains no held event after ev: they stay
// held, under the gap policy (the processor's way out when draining them
// would produce a record over its size limit).
func (g *Guard) OfferHoldingBack(kv KV, taskPrefix []byte, ev *envelope.Event, src Source, now time.Time) (Step, error) {
	return g.offer(kv, taskPrefix, ev, src, now, false)
}

// offer is Offer, draining the held events ev lets through only with drain.
func (g *Guard) offer(kv KV, taskPrefix []byte, ev *envelope.Event, src Source, now time.Time, drain bool) (Step, error) {
	sc := new(offerScratch)
	key := appendAggregateKey(sc.key[:0], taskPrefix, g.P.Name, ev.AggregateID)
	key = key[:len(key):len(key)]
	st, err := g.load(kv, key)
	if err != nil {
		return Step{}, err
	}
	step := Step{HeldBefore: st.heldCount}
	if !g.P.Versioned {
		g.applyStore(kv, key, &st, ev, src, &step, &sc.changes)
		return step, nil
	}
	v := ev.AggregateVersion
	switch {
	case v <= st.version:
		step.Outcome = Stale
	case v == st.version+1 && st.heldCount == 0:
		// Nothing is held, so nothing can drain: the record is final after
		// this one application.
		g.applyStore(kv, key, &st, ev, src, &step, &sc.changes)
	case v == st.version+1:
		g.apply(&st, ev, src, &step, &sc.changes)
		if step.Outcome == Applied && drain {
			hp := HeldPrefix(taskPrefix, g.P.Name, ev.AggregateID)
			if err := g.drain(kv, hp, &st, &step, now); err != nil {
				return Step{}, err
			}
		}
		kv.Set(st.encode(key))
	default:
		hk := heldKey(HeldPrefix(taskPrefix, g.P.Name, ev.AggregateID), v)
		if st.inlineV == v {
			step.Outcome = Stale // another event already waits for this version; first arrival wins
			break
		}
		if _, ok, err := kv.Get(hk); err != nil {
			return Step{}, err
		} else if ok {
			step.Outcome = Stale // the same, held under its own key
			break
		}
		if g.MaxHeld > 0 && st.heldCount >= g.MaxHeld {
			step.Outcome = Overflow
			step.Dropped = append(step.Dropped, src)
			break
		}
		w := encodeHeld(now, src)
		if lim := g.inlineLimit(); st.inlineV == 0 && len(w) <= lim && len(st.doc)+len(w) <= maxInlineRecord {
			st.inlineV, st.inline = v, w
		} else {
			kv.Set(hk, w)
		}
		if st.heldCount == 0 {
			st.heldSince = now.UnixMilli()
		}
		st.heldCount++
		step.Outcome = Held
		kv.Set(st.encode(key))
	}
	step.HeldCount = st.heldCount
	if st.heldCount > 0 {
		step.HeldSince = time.UnixMilli(st.heldSince)
	}
	return step, nil
}

// addChange appends c to step.Changes, in spare when that is the first.
func addChange(step *Step, spare *[1]Change, c Change) {
	if step.Changes == nil && spare != nil {
		step.Changes = spare[:0]
	}
	step.Changes = append(step.Changes, c)
}

// mergeBufs are scratch buffers the merge rule writes the new state into
// before it is copied into the record (of exactly the right size) or, when
// held events may drain after it, into a state of its own.
var mergeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledMerge bounds the scratch buffers kept for reuse.
const maxPooledMerge = 64 << 10

// run calls the projection's handler for ev on st's state. The merge rule
// of the declarative Rules writes its result into a pooled scratch buffer,
// returned as buf: put it back (mergeBufs) once res.State has been copied.
func (g *Guard) run(st *aggState, ev *envelope.Event) (res projection.Result, buf *[]byte, err error) {
	r, ok := g.P.Handler.(projection.Rules)
	if !ok {
		res, err = g.P.Handler.Apply(st.current(false), handlerEvent(ev))
		return res, nil, err
	}
	var patch []byte
	if r[ev.EventType] == projection.Merge {
		patch, err = jsonmerge.Patch(ev.Payload)
	}
	if patch == nil {
		// Not a merge, nothing to merge, or not an object: Rules decides,
		// without touching the state (so it may be the shared "{}").
		res, err = r.Apply(st.current(true), handlerEvent(ev))
		return res, nil, err
	}
	buf = mergeBufs.Get().(*[]byte)
	res.State, err = jsonmerge.AppendMergePatch((*buf)[:0], st.current(true), patch)
	if res.State != nil && cap(res.State) <= maxPooledMerge {
		*buf = res.State[:0]
	}
	if err != nil {
		mergeBufs.Put(buf)
		return projection.Result{}, nil, err
	}
	return res, buf, nil
}

// handlerEvent is ev as a handler sees it. projection.Event declares the
// fields of envelope.Event one for one, so the conversion is of the pointer
// only: no copy on the hot path. The compiler refuses it if the two ever
// differ (and TestHandlerEventIsEnvelope says which field).
func handlerEvent(ev *envelope.Event) *projection.Event { return (*projection.Event)(ev) }

// failed records that the handler rejected ev.
func failed(step *Step, src Source, err error) {
	step.Outcome = Failed
	step.Failures = append(step.Failures, Failure{Source: src, Err: err})
}

// applied records ev's application as st's current version (in spare, if
// not nil, when it is the step's first change).
func applied(step *Step, spare *[1]Change, st *aggState, ev *envelope.Event, src Source, effects []projection.Intent) {
	step.Outcome = Applied
	addChange(step, spare, Change{
		Event: handlerEvent(ev), Source: src, Version: st.version, State: st.doc, Deleted: st.deleted, Effects: effects,
	})
}

// applyStore is apply followed by staging the record, for when nothing can
// drain after ev (so the record's header is known up front): the record is
// encoded once, with the new state copied into it directly, and the change's
// State is the record's tail.
func (g *Guard) applyStore(kv KV, key []byte, st *aggState, ev *envelope.Event, src Source, step *Step, spare *[1]Change) {
	res, buf, err := g.run(st, ev)
	if err != nil {
		failed(step, src, err)
		kv.Set(st.encode(key))
		return
	}
	st.advance(res)
	k, rec := st.encode(key)
	if buf != nil {
		mergeBufs.Put(buf) // res.State is in rec now
	}
	if st.doc != nil {
		st.doc = rec[len(rec)-len(st.doc):] // the record's tail, not the buffer
	}
	kv.Set(k, rec)
	applied(step, spare, st, ev, src, res.Effects)
}

// apply runs the handler for ev as version st.version+1 and records the change
// (in spare, if not nil, when it is the step's first).
func (g *Guard) apply(st *aggState, ev *envelope.Event, src Source, step *Step, spare *[1]Change) {
	res, buf, err := g.run(st, ev)
	if err != nil {
		failed(step, src, err)
		return
	}
	st.advance(res)
	if st.doc != nil && !res.Keep {
		st.doc = bytes.Clone(st.doc) // off the handler's (or the pool's) buffer
	}
	if buf != nil {
		mergeBufs.Put(buf)
	}
	applied(step, spare, st, ev, src, res.Effects)
}

// drain applies held events while the next version is waiting.
func (g *Guard) drain(kv KV, hp []byte, st *aggState, step *Step, now time.Time) error {
	return g.drainBefore(kv, hp, st, step, now, 0)
}

// drainBefore is drain that applies no version from stop on (0: no stop).
func (g *Guard) drainBefore(kv KV, hp []byte, st *aggState, step *Step, now time.Time, stop int64) error {
	drained := false
	for st.heldCount > 0 && (stop == 0 || st.version+1 < stop) {
		var v []byte
		if st.inlineV == st.version+1 {
			v = st.takeInline()
		} else {
			hk := heldKey(hp, st.version+1)
			var ok bool
			var err error
			if v, ok, err = kv.Get(hk); err != nil {
				return err
			} else if !ok {
				break
			}
			kv.Delete(hk)
		}
		st.heldCount--
		drained = true
		if !g.applyHeld(st, v, step) {
			break
		}
	}
	if st.heldCount == 0 {
		st.heldSince = 0
	} else if drained {
		// The gap that held these events closed; a new one starts now.
		st.heldSince = now.UnixMilli()
	}
	return nil
}

// applyHeld decodes and applies one held event; false if it failed.
func (g *Guard) applyHeld(st *aggState, stored []byte, step *Step) bool {
	_, src, err := DecodeHeld(stored)
	if err != nil {
		// Dead-letter the stored bytes rather than lose them.
		step.Failures = append(step.Failures, Failure{Source: Source{Offset: -1, Value: append([]byte(nil), stored...)},
			Err: fmt.Errorf("projection %s: held event: %w", g.P.Name, err)})
		return false
	}
	src.Key = append([]byte(nil), src.Key...)
	src.Value = append([]byte(nil), src.Value...)
	if src.TraceParent != nil { // the outputs' trace headers: kept as the key and value
		src.TraceParent = append([]byte(nil), src.TraceParent...)
		src.TraceState = bytes.Clone(src.TraceState)
	}
	ev, err := envelope.Decode(src.Value, g.MaxRecordBytes)
	if err != nil {
		step.Failures = append(step.Failures, Failure{Source: src, Err: err})
		return false
	}
	outcome := step.Outcome
	g.apply(st, ev, src, step, nil)
	ok := step.Outcome == Applied
	step.Outcome = outcome
	return ok
}
