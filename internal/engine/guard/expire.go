package guard

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/projector-dev/projector/projection"
)

// Expire resolves an aggregate's gap by policy (Skip or DeadLetter; Wait does
// nothing) once it has been open for hold, as the aggregate's state says; a
// younger gap is left alone, and the step reports it as it is (HeldBefore =
// HeldCount, HeldSince). Operators use Skip with hold 0 through `gaps skip`.
func (g *Guard) Expire(kv KV, taskPrefix []byte, aggregate string, p projection.Policy, now time.Time, hold time.Duration) (Step, error) {
	return g.ExpireBefore(kv, taskPrefix, aggregate, p, now, hold, 0)
}

// ExpireBefore is Expire whose Skip applies no held event from version stop
// on (0: no stop). The held event at stop itself is removed unapplied (the
// caller dead-letters it: its outputs would not fit a record), and the
// versions after it wait behind it as a new gap, under the same policy.
func (g *Guard) ExpireBefore(kv KV, taskPrefix []byte, aggregate string, p projection.Policy, now time.Time, hold time.Duration, stop int64) (Step, error) {
	var step Step
	if p == projection.Wait {
		return step, nil
	}
	key := AggregateKey(taskPrefix, g.P.Name, aggregate)
	st, err := g.load(kv, key)
	if err != nil || st.heldCount == 0 {
		return step, err
	}
	step.HeldBefore = st.heldCount
	if since := time.UnixMilli(st.heldSince); now.Sub(since) < hold {
		step.HeldCount, step.HeldSince = st.heldCount, since
		return step, nil
	}
	hp := HeldPrefix(taskPrefix, g.P.Name, aggregate)
	all, err := liveHeld(kv, hp, &st)
	if err != nil {
		return step, err
	}
	switch p {
	case projection.DeadLetter:
		g.deadLetterHeld(kv, &st, all, &step)
	case projection.Skip:
		if err := g.skipGap(kv, hp, &st, all, &step, now, stop); err != nil {
			return step, err
		}
	}
	// Whatever is still held waits behind a new gap, which opens now: the
	// next skip needs its own full hold timeout.
	if st.heldCount > 0 {
		st.heldSince = now.UnixMilli()
	} else {
		st.heldSince = 0
	}
	kv.Set(st.encode(key))
	step.HeldCount = st.heldCount
	if st.heldCount > 0 {
		step.HeldSince = time.UnixMilli(st.heldSince)
	}
	return step, nil
}

// heldEntry is one of an aggregate's held events as stored: under its own
// key, or (key nil) inline in the aggregate record.
type heldEntry struct {
	key, val []byte
	version  int64
}

// removeHeld deletes h from the store: its key, or the record's inline slot.
func removeHeld(kv KV, st *aggState, h heldEntry) {
	if h.key == nil {
		st.takeInline()
	} else {
		kv.Delete(h.key)
	}
}

// liveHeld returns the aggregate's held events in version order – the
// record's inline one and those under hp – and sets st's held count to
// their number: the count is reconciled with what is really held.
func liveHeld(kv KV, hp []byte, st *aggState) ([]heldEntry, error) {
	var all []heldEntry
	if st.inlineV > 0 {
		all = append(all, heldEntry{val: st.inline, version: st.inlineV})
	}
	err := kv.Scan(hp, func(k, v []byte) error {
		if len(k) != len(hp)+8 {
			return nil
		}
		all = append(all, heldEntry{
			key: append([]byte(nil), k...), val: append([]byte(nil), v...),
			version: int64(binary.BigEndian.Uint64(k[len(hp):])),
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The inline event first, then the keys in version order: put it in
	// its place.
	for i := 1; i < len(all) && all[i].version < all[i-1].version; i++ {
		all[i], all[i-1] = all[i-1], all[i]
	}
	// Entries at or below the current version can only be leftovers (a
	// deletion lost to changelog compaction while this instance was away);
	// they must never move the guard back.
	live := all[:0]
	for _, h := range all {
		if h.version <= st.version {
			removeHeld(kv, st, h)
			continue
		}
		live = append(live, h)
	}
	st.heldCount = int64(len(live))
	return live, nil
}

// deadLetterHeld removes every held event, reporting each as Dropped (the
// caller dead-letters it with reason gap-timeout), or as a Failure when its
// stored wrapper cannot be decoded.
func (g *Guard) deadLetterHeld(kv KV, st *aggState, all []heldEntry, step *Step) {
	for _, h := range all {
		removeHeld(kv, st, h)
		if _, src, err := DecodeHeld(h.val); err == nil {
			step.Dropped = append(step.Dropped, Source{Offset: src.Offset,
				Key: append([]byte(nil), src.Key...), Value: append([]byte(nil), src.Value...)})
		} else {
			step.Failures = append(step.Failures, Failure{Source: Source{Offset: -1, Value: h.val},
				Err: fmt.Errorf("projection %s: held event: %w", g.P.Name, err)})
		}
	}
	st.heldCount = 0
}

// skipGap jumps the gap to the lowest held version, applies it and drains
// the held versions that follow, up to stop (see ExpireBefore). all is
// liveHeld's list.
func (g *Guard) skipGap(kv KV, hp []byte, st *aggState, all []heldEntry, step *Step, now time.Time, stop int64) error {
	if len(all) == 0 {
		return nil
	}
	h := all[0]
	removeHeld(kv, st, h)
	st.heldCount--
	st.version = h.version - 1 // jump the gap
	if h.version != stop && g.applyHeld(st, h.val, step) {
		if err := g.drainBefore(kv, hp, st, step, now, stop); err != nil {
			return err
		}
	}
	if stop != 0 && st.version+1 == stop && stop != h.version {
		// The event at stop is not applied: the skip ends in front of it,
		// and it leaves the held events (as h, if it is h, did above).
		return removeHeldVersion(kv, hp, st, stop)
	}
	return nil
}

// removeHeldVersion removes the held event of version v, inline or under its
// own key, if it is held.
func removeHeldVersion(kv KV, hp []byte, st *aggState, v int64) error {
	if st.inlineV == v {
		st.takeInline()
		st.heldCount--
		return nil
	}
	hk := heldKey(hp, v)
	_, ok, err := kv.Get(hk)
	if err != nil || !ok {
		return err
	}
	kv.Delete(hk)
	st.heldCount--
	return nil
}
