package projection

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/projector-dev/projector/internal/envelope"
)

// Changelog-key kind bytes of the guard's state.
const (
	KindAggregate = 'a'
	KindHeld      = 'h'
)

// Outcome is the guard's verdict on one offered event.
type Outcome uint8

const (
	Applied Outcome = iota
	Stale
	Held
	// Failed: the handler returned an error; the event is dead-lettered and
	// the guard did not advance.
	Failed
	// Overflow: the aggregate already holds the maximum number of events; the
	// event is dead-lettered instead of held.
	Overflow
)

func (o Outcome) String() string {
	return [...]string{"applied", "stale", "held", "failed", "overflow"}[o]
}

// KV is the staged state the guard reads and writes (a *state.Txn).
type KV interface {
	Get(key []byte) ([]byte, bool, error)
	Set(key, val []byte)
	Delete(key []byte)
	Scan(prefix []byte, fn func(key, value []byte) error) error
}

// Source locates an event's original record, for outputs and dead letters.
type Source struct {
	Offset     int64
	Key, Value []byte
}

// Change is one application of an event to an aggregate: the processor emits
// one projection record per Change.
type Change struct {
	Event   *Event
	Source  Source
	Version int64
	State   []byte // nil when Deleted
	Deleted bool
	Effects []Intent
}

// Failure is an event the handler rejected (or a held event that could not be
// re-read); the processor dead-letters it.
type Failure struct {
	Source Source
	Err    error
}

// Step is everything one Offer (or Expire) did.
type Step struct {
	Outcome  Outcome
	Changes  []Change  // in version order; drained held events follow the offered one
	Failures []Failure // dead-letter these with reason handler-error
	Dropped  []Source  // dead-letter these with reason gap-timeout
	// Gap is the aggregate's gap after the step: HeldCount events wait since
	// HeldSince (zero when none wait). HeldBefore is how many waited before
	// it: a step with both zero cannot have opened, moved or closed a gap.
	HeldCount  int64
	HeldSince  time.Time
	HeldBefore int64
}

// Guard applies one projection's events to aggregate state through a KV.
type Guard struct {
	P       *Projection
	MaxHeld int64
	// MaxRecordBytes is the envelope size limit used when held events are
	// decoded again (0: the envelope default); it must match the limit the
	// processor accepted them under.
	MaxRecordBytes int
	// InlineHeldBytes bounds the held event an aggregate record may carry
	// inline (its stored wrapper; 0: DefaultInlineHeld, negative: none).
	InlineHeldBytes int
}

// DefaultInlineHeld is the largest held event (stored wrapper) an aggregate
// record carries inline. An aggregate's first held event goes into its
// record, which is written anyway (the held count changes), instead of a key
// of its own: a stream of events that each open a gap then costs one state
// write per event, as in-order events do, not two. Larger events, and any
// held while the slot is taken, get a key of their own; the slot is kept
// small because the record is rewritten with every later event of the
// aggregate until the event drains.
const DefaultInlineHeld = 4 << 10

// maxInlineRecord is the largest aggregate record (state and inline event)
// that takes an inline held event: a large state is rewritten with it.
const maxInlineRecord = 64 << 10

func (g *Guard) inlineLimit() int {
	if g.InlineHeldBytes == 0 {
		return DefaultInlineHeld
	}
	return g.InlineHeldBytes
}

// aggState is the stored per-aggregate record.
type aggState struct {
	version   int64
	deleted   bool
	heldCount int64 // held events: the inline one and those under the held prefix
	heldSince int64 // unix ms; 0 when nothing is held
	// inlineV is the version of the held event the record carries inline
	// (0: none), inline its stored wrapper (encodeHeld).
	inlineV int64
	inline  []byte
	doc     []byte
}

// Record formats: aggFormat is the header and the document; aggFormatInline
// adds, between them, a held event (uvarint version, uvarint length, the
// wrapper). A record without an inline event is written in aggFormat, so
// stores and changelogs without one read as before.
const (
	aggFormat       = 1
	aggFormatInline = 2
)

// maxAggHeader bounds the encoded record before the document (and the
// inline event's bytes).
const maxAggHeader = 1 + binary.MaxVarintLen64 + 1 + 4*binary.MaxVarintLen64

// encode returns the record in a new slice of its exact size (KV.Set keeps it).
func (s *aggState) encode() []byte {
	var h [maxAggHeader]byte
	hdr := s.appendHeader(h[:0])
	b := make([]byte, 0, len(hdr)+len(s.inline)+len(s.doc))
	b = append(b, hdr...)
	b = append(b, s.inline...)
	return append(b, s.doc...)
}

// appendHeader appends the record up to the inline event's bytes (or the
// document, without one).
func (s *aggState) appendHeader(b []byte) []byte {
	if s.inlineV > 0 {
		b = append(b, aggFormatInline)
	} else {
		b = append(b, aggFormat)
	}
	b = binary.AppendUvarint(b, uint64(s.version))
	var flags byte
	if s.deleted {
		flags |= 1
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(s.heldCount))
	b = binary.AppendVarint(b, s.heldSince)
	if s.inlineV > 0 {
		b = binary.AppendUvarint(b, uint64(s.inlineV))
		b = binary.AppendUvarint(b, uint64(len(s.inline)))
	}
	return b
}

var errCorrupt = errors.New("projection: corrupt aggregate record")

func decodeAgg(b []byte) (aggState, error) {
	var s aggState
	if len(b) < 1 || (b[0] != aggFormat && b[0] != aggFormatInline) {
		return s, errCorrupt
	}
	inline := b[0] == aggFormatInline
	b = b[1:]
	v, n := binary.Uvarint(b)
	if n <= 0 || len(b) < n+1 {
		return s, errCorrupt
	}
	s.version = int64(v)
	s.deleted = b[n]&1 != 0
	b = b[n+1:]
	hc, n := binary.Uvarint(b)
	if n <= 0 {
		return s, errCorrupt
	}
	s.heldCount = int64(hc)
	b = b[n:]
	hs, n := binary.Varint(b)
	if n <= 0 {
		return s, errCorrupt
	}
	s.heldSince = hs
	b = b[n:]
	if inline {
		iv, n := binary.Uvarint(b)
		if n <= 0 || iv == 0 {
			return s, errCorrupt
		}
		b = b[n:]
		il, n := binary.Uvarint(b)
		if n <= 0 || il > uint64(len(b)-n) {
			return s, errCorrupt
		}
		b = b[n:]
		s.inlineV, s.inline, b = int64(iv), b[:il:il], b[il:]
	}
	s.doc = b
	return s, nil
}

// takeInline removes the inline held event from st (it stays in the slice
// it was decoded from) and returns it.
func (st *aggState) takeInline() []byte {
	v := st.inline
	st.inlineV, st.inline = 0, nil
	return v
}

// AggregateKey is the state key of (projection, aggregate) below taskPrefix.
func AggregateKey(taskPrefix []byte, projection, aggregate string) []byte {
	return appendAggregateKey(make([]byte, 0, len(taskPrefix)+len(projection)+len(aggregate)+4), taskPrefix, projection, aggregate)
}

func appendAggregateKey(k, taskPrefix []byte, projection, aggregate string) []byte {
	k = append(k, taskPrefix...)
	k = append(k, KindAggregate)
	k = binary.AppendUvarint(k, uint64(len(projection)))
	k = append(k, projection...)
	return append(k, aggregate...)
}

// HeldPrefix is the key prefix of an aggregate's held events, ordered by version.
func HeldPrefix(taskPrefix []byte, projection, aggregate string) []byte {
	k := make([]byte, 0, len(taskPrefix)+len(projection)+len(aggregate)+16)
	k = append(k, taskPrefix...)
	k = append(k, KindHeld)
	k = binary.AppendUvarint(k, uint64(len(projection)))
	k = append(k, projection...)
	k = binary.AppendUvarint(k, uint64(len(aggregate)))
	return append(k, aggregate...)
}

func heldKey(prefix []byte, version int64) []byte {
	return binary.BigEndian.AppendUint64(append(make([]byte, 0, len(prefix)+8), prefix...), uint64(version))
}

// ParseHeldKey splits a held key's changelog part (kind byte first) into
// projection, aggregate and version.
func ParseHeldKey(k []byte) (projection, aggregate string, version int64, err error) {
	if len(k) < 1 || k[0] != KindHeld {
		return "", "", 0, errCorrupt
	}
	k = k[1:]
	n, w := binary.Uvarint(k)
	if w <= 0 || len(k) < w+int(n) {
		return "", "", 0, errCorrupt
	}
	projection, k = string(k[w:w+int(n)]), k[w+int(n):]
	n, w = binary.Uvarint(k)
	if w <= 0 || len(k) != w+int(n)+8 {
		return "", "", 0, errCorrupt
	}
	aggregate = string(k[w : w+int(n)])
	version = int64(binary.BigEndian.Uint64(k[w+int(n):]))
	return projection, aggregate, version, nil
}

func encodeHeld(at time.Time, src Source) []byte {
	b := make([]byte, 0, 24+len(src.Key)+len(src.Value))
	b = binary.AppendVarint(b, at.UnixMilli())
	b = binary.AppendVarint(b, src.Offset)
	if src.Key == nil {
		b = binary.AppendVarint(b, -1)
	} else {
		b = binary.AppendVarint(b, int64(len(src.Key)))
		b = append(b, src.Key...)
	}
	return append(b, src.Value...)
}

// DecodeHeld decodes a held event's stored value.
func DecodeHeld(b []byte) (at time.Time, src Source, err error) {
	ms, n := binary.Varint(b)
	if n <= 0 {
		return at, src, errCorrupt
	}
	b = b[n:]
	src.Offset, n = binary.Varint(b)
	if n <= 0 {
		return at, src, errCorrupt
	}
	b = b[n:]
	kl, n := binary.Varint(b)
	if n <= 0 || kl > int64(len(b)-n) {
		return at, src, errCorrupt
	}
	b = b[n:]
	if kl >= 0 {
		src.Key, b = b[:kl:kl], b[kl:]
	}
	src.Value = b
	return time.UnixMilli(ms), src, nil
}

func (g *Guard) load(kv KV, key []byte) (aggState, error) {
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
func (g *Guard) Offer(kv KV, taskPrefix []byte, ev *Event, src Source, now time.Time) (Step, error) {
	return g.offer(kv, taskPrefix, ev, src, now, true)
}

// OfferHoldingBack is Offer that drains no held event after ev: they stay
// held, under the gap policy (the processor's way out when draining them
// would produce a record over its size limit).
func (g *Guard) OfferHoldingBack(kv KV, taskPrefix []byte, ev *Event, src Source, now time.Time) (Step, error) {
	return g.offer(kv, taskPrefix, ev, src, now, false)
}

func (g *Guard) offer(kv KV, taskPrefix []byte, ev *Event, src Source, now time.Time, drain bool) (Step, error) {
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
		kv.Set(key, st.encode())
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
		kv.Set(key, st.encode())
	}
	step.HeldCount = st.heldCount
	if st.heldCount > 0 {
		step.HeldSince = time.UnixMilli(st.heldSince)
	}
	return step, nil
}

// current is the state the handler sees: "{}" for a new or deleted
// aggregate, in a new slice for a handler of unknown code.
func (st *aggState) current(shared bool) []byte {
	if st.deleted || len(st.doc) == 0 {
		if shared {
			return emptyObject[:2:2]
		}
		return []byte("{}")
	}
	return st.doc
}

// emptyObject is "{}" for the merge rule, which never writes its input.
var emptyObject = []byte("{}")

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
// (Rules) writes its result into a pooled scratch buffer, returned as buf:
// put it back (mergeBufs) once res.State has been copied.
func (g *Guard) run(st *aggState, ev *Event) (res Result, buf *[]byte, err error) {
	r, ok := g.P.Handler.(Rules)
	if !ok {
		res, err = g.P.Handler.Apply(st.current(false), ev)
		return res, nil, err
	}
	var patch []byte
	if res, patch, err = r.decide(ev); patch == nil || err != nil {
		return res, nil, err
	}
	buf = mergeBufs.Get().(*[]byte)
	res.State, err = appendMergePatch((*buf)[:0], st.current(true), patch)
	if res.State != nil && cap(res.State) <= maxPooledMerge {
		*buf = res.State[:0]
	}
	if err != nil {
		mergeBufs.Put(buf)
		return Result{}, nil, err
	}
	return res, buf, nil
}

// advance moves st to the next version as res says; the new state is
// res.State itself, not a copy.
func (st *aggState) advance(res Result) {
	st.version++
	switch {
	case res.Keep:
	case res.Delete:
		st.deleted, st.doc = true, nil
	default:
		st.deleted, st.doc = false, nil
		if len(res.State) > 0 {
			st.doc = res.State
		}
	}
}

// failed records that the handler rejected ev.
func failed(step *Step, src Source, err error) {
	step.Outcome = Failed
	step.Failures = append(step.Failures, Failure{Source: src, Err: err})
}

// applied records ev's application as st's current version (in spare, if
// not nil, when it is the step's first change).
func applied(step *Step, spare *[1]Change, st *aggState, ev *Event, src Source, effects []Intent) {
	step.Outcome = Applied
	addChange(step, spare, Change{
		Event: ev, Source: src, Version: st.version, State: st.doc, Deleted: st.deleted, Effects: effects,
	})
}

// applyStore is apply followed by staging the record, for when nothing can
// drain after ev (so the record's header is known up front): the record is
// encoded once, with the new state copied into it directly, and the change's
// State is the record's tail.
func (g *Guard) applyStore(kv KV, key []byte, st *aggState, ev *Event, src Source, step *Step, spare *[1]Change) {
	res, buf, err := g.run(st, ev)
	if err != nil {
		failed(step, src, err)
		kv.Set(key, st.encode())
		return
	}
	st.advance(res)
	rec := st.encode()
	if buf != nil {
		mergeBufs.Put(buf) // res.State is in rec now
	}
	if st.doc != nil {
		st.doc = rec[len(rec)-len(st.doc):] // the record's tail, not the buffer
	}
	kv.Set(key, rec)
	applied(step, spare, st, ev, src, res.Effects)
}

// apply runs the handler for ev as version st.version+1 and records the change
// (in spare, if not nil, when it is the step's first).
func (g *Guard) apply(st *aggState, ev *Event, src Source, step *Step, spare *[1]Change) {
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

// Policy is what to do with a gap that outlived the hold timeout.
type Policy uint8

const (
	// Wait keeps holding (the gap is only reported).
	Wait Policy = iota
	// Skip applies the held events past the gap, lowest version first.
	Skip
	// DeadLetter drops the held events to the dead-letter topic.
	DeadLetter
)

// ParsePolicy parses gaps.onTimeout.
func ParsePolicy(s string) (Policy, error) {
	switch s {
	case "wait", "":
		return Wait, nil
	case "skip":
		return Skip, nil
	case "deadletter":
		return DeadLetter, nil
	}
	return Wait, fmt.Errorf("projection: unknown gap policy %q (want wait, skip or deadletter)", s)
}

// Expire resolves an aggregate's gap by policy (Skip or DeadLetter; Wait does
// nothing) once it has been open for hold, as the aggregate's state says; a
// younger gap is left alone, and the step reports it as it is (HeldBefore =
// HeldCount, HeldSince). Operators use Skip with hold 0 through `gaps skip`.
func (g *Guard) Expire(kv KV, taskPrefix []byte, aggregate string, p Policy, now time.Time, hold time.Duration) (Step, error) {
	return g.ExpireBefore(kv, taskPrefix, aggregate, p, now, hold, 0)
}

// ExpireBefore is Expire whose Skip applies no held event from version stop
// on (0: no stop). The held event at stop itself is removed unapplied (the
// caller dead-letters it: its outputs would not fit a record), and the
// versions after it wait behind it as a new gap, under the same policy.
func (g *Guard) ExpireBefore(kv KV, taskPrefix []byte, aggregate string, p Policy, now time.Time, hold time.Duration, stop int64) (Step, error) {
	var step Step
	if p == Wait {
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
	type held struct {
		key, val []byte // key nil: the record's inline event
		version  int64
	}
	var all []held
	if st.inlineV > 0 {
		all = append(all, held{val: st.inline, version: st.inlineV})
	}
	remove := func(h held) {
		if h.key == nil {
			st.takeInline()
		} else {
			kv.Delete(h.key)
		}
	}
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
	// The inline event first, then the keys in version order: put it in
	// its place.
	for i := 1; i < len(all) && all[i].version < all[i-1].version; i++ {
		all[i], all[i-1] = all[i-1], all[i]
	}
	// Reconcile with what is really held: entries at or below the current
	// version can only be leftovers (a deletion lost to changelog compaction
	// while this instance was away); they must never move the guard back.
	live := all[:0]
	for _, h := range all {
		if h.version <= st.version {
			remove(h)
			continue
		}
		live = append(live, h)
	}
	all = live
	st.heldCount = int64(len(all))
	switch p {
	case DeadLetter:
		for _, h := range all {
			remove(h)
			if _, src, err := DecodeHeld(h.val); err == nil {
				step.Dropped = append(step.Dropped, Source{Offset: src.Offset,
					Key: append([]byte(nil), src.Key...), Value: append([]byte(nil), src.Value...)})
			} else {
				step.Failures = append(step.Failures, Failure{Source: Source{Offset: -1, Value: h.val},
					Err: fmt.Errorf("projection %s: held event: %w", g.P.Name, err)})
			}
		}
		st.heldCount = 0
	case Skip:
		if len(all) > 0 {
			h := all[0]
			remove(h)
			st.heldCount--
			st.version = h.version - 1 // jump the gap
			if h.version != stop && g.applyHeld(&st, h.val, &step) {
				if err := g.drainBefore(kv, hp, &st, &step, now, stop); err != nil {
					return step, err
				}
			}
			if stop != 0 && st.version+1 == stop {
				// The event at stop is not applied: the skip ends in front
				// of it, and it leaves the held events.
				if sk := heldKey(hp, stop); stop == h.version {
					// removed above
				} else if st.inlineV == stop {
					st.takeInline()
					st.heldCount--
				} else if _, ok, err := kv.Get(sk); err != nil {
					return step, err
				} else if ok {
					kv.Delete(sk)
					st.heldCount--
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
	kv.Set(key, st.encode())
	step.HeldCount = st.heldCount
	if st.heldCount > 0 {
		step.HeldSince = time.UnixMilli(st.heldSince)
	}
	return step, nil
}

// Snapshot is an aggregate's guard state, for inspection.
type Snapshot struct {
	Version   int64
	Deleted   bool
	HeldCount int64
	HeldSince time.Time
	State     []byte
	// Inline is the held event the record carries (nil: none); the others
	// are under the aggregate's held prefix.
	Inline *HeldEvent
}

// HeldEvent is a held event as stored: its version, when it was held, and
// its original record.
type HeldEvent struct {
	Version int64
	At      time.Time
	Source  Source
}

// Inspect reads an aggregate's guard state.
func (g *Guard) Inspect(kv KV, taskPrefix []byte, aggregate string) (Snapshot, bool, error) {
	v, ok, err := kv.Get(AggregateKey(taskPrefix, g.P.Name, aggregate))
	if err != nil || !ok {
		return Snapshot{}, ok, err
	}
	s, err := DecodeSnapshot(v)
	return s, err == nil, err
}

func (p Policy) String() string {
	switch p {
	case Skip:
		return "skip"
	case DeadLetter:
		return "deadletter"
	}
	return "wait"
}

// DecodeSnapshot decodes a stored aggregate record (a changelog value of kind
// KindAggregate), for tools that read the changelog topic.
func DecodeSnapshot(v []byte) (Snapshot, error) {
	st, err := decodeAgg(v)
	if err != nil {
		return Snapshot{}, err
	}
	s := Snapshot{Version: st.version, Deleted: st.deleted, HeldCount: st.heldCount, State: st.doc}
	if st.heldSince != 0 {
		s.HeldSince = time.UnixMilli(st.heldSince)
	}
	if st.inlineV > 0 {
		at, src, err := DecodeHeld(st.inline)
		if err != nil {
			return Snapshot{}, err
		}
		s.Inline = &HeldEvent{Version: st.inlineV, At: at, Source: src}
	}
	return s, nil
}

// ParseAggregateKey splits an aggregate record's changelog key (kind byte
// first) into projection and aggregate.
func ParseAggregateKey(k []byte) (projection, aggregate string, err error) {
	if len(k) < 1 || k[0] != KindAggregate {
		return "", "", errCorrupt
	}
	k = k[1:]
	n, w := binary.Uvarint(k)
	if w <= 0 || len(k) < w+int(n) {
		return "", "", errCorrupt
	}
	return string(k[w : w+int(n)]), string(k[w+int(n):]), nil
}
