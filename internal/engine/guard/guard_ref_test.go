package guard

// The guard's methods before the allocation work (copied from the previous
// guard.go), as refGuard: the differential test runs the same offers through
// both and compares every step and every staged write.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/projection"
)

type refGuard Guard

// refEncode is the previous aggState.encode.
func refEncode(s *aggState) []byte {
	b := make([]byte, 0, 24+len(s.doc))
	b = append(b, aggFormat)
	b = binary.AppendUvarint(b, uint64(s.version))
	var flags byte
	if s.deleted {
		flags |= 1
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(s.heldCount))
	b = binary.AppendVarint(b, s.heldSince)
	return append(b, s.doc...)
}

// refRules is the previous Rules.Apply, over the public merge
// (projection.MergePatch, itself checked against a reference in
// internal/core/jsonmerge): the reference guard runs it where the guard
// runs Rules, whose merge writes into a pooled buffer of its own.
type refRules projection.Rules

func (r refRules) Apply(state []byte, ev *projection.Event) (projection.Result, error) {
	switch r[ev.EventType] {
	case projection.Delete:
		return projection.Result{Delete: true}, nil
	case projection.Merge:
		p := bytes.TrimSpace(ev.Payload)
		if len(p) == 0 || bytes.Equal(p, []byte("null")) {
			return projection.Result{Keep: true}, nil // nothing to merge
		}
		if p[0] != '{' {
			return projection.Result{}, projection.ErrPayloadNotObject
		}
		out, err := projection.MergePatch(state, p)
		if err != nil {
			return projection.Result{}, err
		}
		return projection.Result{State: out}, nil
	default:
		return projection.Result{Keep: true}, nil
	}
}

func (g *refGuard) load(kv KV, key []byte) (aggState, error) {
	v, ok, err := kv.Get(key)
	if err != nil || !ok {
		return aggState{}, err
	}
	s, err := decodeAgg(v)
	if err != nil {
		return s, fmt.Errorf("projection %s: %w", g.P.Name, err)
	}
	return s, nil
}

// Offer presents a new (deduplicated) event to the guard.
func (g *refGuard) Offer(kv KV, taskPrefix []byte, ev *envelope.Event, src Source, now time.Time) (Step, error) {
	key := AggregateKey(taskPrefix, g.P.Name, ev.AggregateID)
	st, err := g.load(kv, key)
	if err != nil {
		return Step{}, err
	}
	var step Step
	if !g.P.Versioned {
		g.apply(&st, ev, src, &step)
		kv.Set(key, refEncode(&st))
		return step, nil
	}
	v := ev.AggregateVersion
	hp := HeldPrefix(taskPrefix, g.P.Name, ev.AggregateID)
	switch {
	case v <= st.version:
		step.Outcome = Stale
	case v == st.version+1:
		g.apply(&st, ev, src, &step)
		if step.Outcome == Applied {
			if err := g.drain(kv, hp, &st, &step, now); err != nil {
				return Step{}, err
			}
		}
		kv.Set(key, refEncode(&st))
	default:
		hk := heldKey(hp, v)
		if _, ok, err := kv.Get(hk); err != nil {
			return Step{}, err
		} else if ok {
			// Another event already waits for this version; first arrival wins.
			step.Outcome = Stale
			break
		}
		if g.MaxHeld > 0 && st.heldCount >= g.MaxHeld {
			step.Outcome = Overflow
			step.Dropped = append(step.Dropped, src)
			break
		}
		kv.Set(hk, encodeHeld(now, src))
		if st.heldCount == 0 {
			st.heldSince = now.UnixMilli()
		}
		st.heldCount++
		step.Outcome = Held
		kv.Set(key, refEncode(&st))
	}
	step.HeldCount = st.heldCount
	if st.heldCount > 0 {
		step.HeldSince = time.UnixMilli(st.heldSince)
	}
	return step, nil
}

// apply runs the handler for ev as version st.version+1 and records the change.
func (g *refGuard) apply(st *aggState, ev *envelope.Event, src Source, step *Step) {
	cur := st.doc
	if st.deleted || len(cur) == 0 {
		cur = []byte("{}")
	}
	res, err := g.P.Handler.Apply(cur, (*projection.Event)(ev))
	if err != nil {
		step.Outcome = Failed
		step.Failures = append(step.Failures, Failure{Source: src, Err: err})
		return
	}
	st.version++
	switch {
	case res.Keep:
	case res.Delete:
		st.deleted, st.doc = true, nil
	default:
		st.deleted = false
		st.doc = append([]byte(nil), res.State...)
	}
	step.Outcome = Applied
	step.Changes = append(step.Changes, Change{
		Event: (*projection.Event)(ev), Source: src, Version: st.version, State: st.doc, Deleted: st.deleted, Effects: res.Effects,
	})
}

// drain applies held events while the next version is waiting.
func (g *refGuard) drain(kv KV, hp []byte, st *aggState, step *Step, now time.Time) error {
	drained := false
	for st.heldCount > 0 {
		hk := heldKey(hp, st.version+1)
		v, ok, err := kv.Get(hk)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		kv.Delete(hk)
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
func (g *refGuard) applyHeld(st *aggState, stored []byte, step *Step) bool {
	_, src, err := DecodeHeld(stored)
	if err != nil {
		// Dead-letter the stored bytes rather than lose them.
		step.Failures = append(step.Failures, Failure{Source: Source{Offset: -1, Value: append([]byte(nil), stored...)},
			Err: fmt.Errorf("projection %s: held event: %w", g.P.Name, err)})
		return false
	}
	src.Key = append([]byte(nil), src.Key...)
	src.Value = append([]byte(nil), src.Value...)
	ev, err := envelope.Decode(src.Value, g.MaxRecordBytes)
	if err != nil {
		step.Failures = append(step.Failures, Failure{Source: src, Err: err})
		return false
	}
	outcome := step.Outcome
	g.apply(st, ev, src, step)
	ok := step.Outcome == Applied
	step.Outcome = outcome
	return ok
}

// Expire resolves an aggregate's gap by policy (Skip or DeadLetter; Wait does
// nothing). Operators use Skip through `gaps skip`.
func (g *refGuard) Expire(kv KV, taskPrefix []byte, aggregate string, p projection.Policy, now time.Time) (Step, error) {
	var step Step
	if p == projection.Wait {
		return step, nil
	}
	key := AggregateKey(taskPrefix, g.P.Name, aggregate)
	st, err := g.load(kv, key)
	if err != nil || st.heldCount == 0 {
		return step, err
	}
	hp := HeldPrefix(taskPrefix, g.P.Name, aggregate)
	type held struct {
		key, val []byte
		version  int64
	}
	var all []held
	err = kv.Scan(hp, func(k, v []byte) error {
		if len(k) != len(hp)+8 {
			return nil
		}
		all = append(all, held{
			key: append([]byte(nil), k...), val: append([]byte(nil), v...),
			version: int64(binary.BigEndian.Uint64(k[len(hp):])),
		})
		return nil
	})
	if err != nil {
		return step, err
	}
	// Reconcile with what is really held: entries at or below the current
	// version can only be leftovers (a deletion lost to changelog compaction
	// while this instance was away); they must never move the guard back.
	live := all[:0]
	for _, h := range all {
		if h.version <= st.version {
			kv.Delete(h.key)
			continue
		}
		live = append(live, h)
	}
	all = live
	st.heldCount = int64(len(all))
	switch p {
	case projection.DeadLetter:
		for _, h := range all {
			kv.Delete(h.key)
			if _, src, err := DecodeHeld(h.val); err == nil {
				step.Dropped = append(step.Dropped, Source{Offset: src.Offset,
					Key: append([]byte(nil), src.Key...), Value: append([]byte(nil), src.Value...)})
			} else {
				step.Failures = append(step.Failures, Failure{Source: Source{Offset: -1, Value: h.val},
					Err: fmt.Errorf("projection %s: held event: %w", g.P.Name, err)})
			}
		}
		st.heldCount = 0
	case projection.Skip:
		if len(all) > 0 {
			h := all[0]
			kv.Delete(h.key)
			st.heldCount--
			st.version = h.version - 1 // jump the gap
			if g.applyHeld(&st, h.val, &step) {
				if err := g.drain(kv, hp, &st, &step, now); err != nil {
					return step, err
				}
			}
		}
	}
	// Whatever is still held waits behind a new gap, which opens now: the
	// next skip needs its own full hold timeout.
	if st.heldCount > 0 {
		st.heldSince = now.UnixMilli()
	} else {
		st.heldSince = 0
	}
	kv.Set(key, refEncode(&st))
	step.HeldCount = st.heldCount
	if st.heldCount > 0 {
		step.HeldSince = time.UnixMilli(st.heldSince)
	}
	return step, nil
}
