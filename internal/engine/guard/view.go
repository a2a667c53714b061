package guard

// The read-only view of the guard's stored state: the key kinds, the key
// parsers and the record decoders. Tools that read the state from the
// changelog topic (the operator commands: projector inspect, gaps) and the
// processor's restore use these; nothing here writes.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Source locates an event's original record, for outputs and dead letters;
// a held event is stored with it. TraceParent and TraceState are the W3C
// trace context the record carried (validated by the caller; nil when
// none), stored with a held event so that its outputs carry it when it
// drains (docs/contract.md#trace-context).
type Source struct {
	Offset                  int64
	Key, Value              []byte
	TraceParent, TraceState []byte
}

// Changelog-key kind bytes of the guard's state: the first byte of a key
// below the task prefix.
const (
	KindAggregate = 'a'
	KindHeld      = 'h'
)

// ParseHeldKey splits a held key's changelog part (kind byte first) into
// projection, aggregate and version.
func ParseHeldKey(k []byte) (projection, aggregate string, version int64, err error) {
	if len(k) < 1 || k[0] != KindHeld {
		return "", "", 0, errCorrupt
	}
	k = k[1:]
	n, w := binary.Uvarint(k)
	if w <= 0 || n > uint64(len(k)-w) { // compared unsigned: a huge length must not wrap
		return "", "", 0, errCorrupt
	}
	projection, k = string(k[w:w+int(n)]), k[w+int(n):]
	n, w = binary.Uvarint(k)
	if w <= 0 || len(k)-w < 8 || n != uint64(len(k)-w-8) {
		return "", "", 0, errCorrupt
	}
	aggregate = string(k[w : w+int(n)])
	version = int64(binary.BigEndian.Uint64(k[w+int(n):]))
	return projection, aggregate, version, nil
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
	if w <= 0 || n > uint64(len(k)-w) { // compared unsigned: a huge length must not wrap
		return "", "", errCorrupt
	}
	return string(k[w : w+int(n)]), string(k[w+int(n):]), nil
}

// CheckRecord reports whether a changelog record of the guard's state (an
// aggregate record or a held event, by its key's kind byte) can be read:
// the processor's restore refuses one that cannot, rather than store it
// for the guard to stumble on later (docs/contract.md#corrupt-changelog-records).
// Records of other kinds, and tombstones, are not the guard's to judge.
func CheckRecord(key, value []byte) error {
	if len(key) == 0 || value == nil {
		return nil
	}
	switch key[0] {
	case KindAggregate:
		if _, _, err := ParseAggregateKey(key); err != nil {
			return fmt.Errorf("%w: its key does not parse", err)
		}
		if _, err := DecodeSnapshot(value); err != nil {
			return fmt.Errorf("%w: its value (%d bytes) does not decode", err, len(value))
		}
	case KindHeld:
		if _, _, _, err := ParseHeldKey(key); err != nil {
			return errors.New("projection: corrupt held event: its key does not parse")
		}
		if _, _, err := DecodeHeld(value); err != nil {
			return fmt.Errorf("projection: corrupt held event: its value (%d bytes) does not decode", len(value))
		}
	}
	return nil
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
	if n <= 0 || kl < heldTraced || kl > int64(len(b)-n) {
		return at, src, errCorrupt
	}
	b = b[n:]
	if kl == heldTraced {
		if src.TraceParent, b, err = heldBytes(b); err != nil {
			return at, src, err
		}
		if src.TraceState, b, err = heldBytes(b); err != nil {
			return at, src, err
		}
		if len(src.TraceState) == 0 {
			src.TraceState = nil
		}
		if kl, n = binary.Varint(b); n <= 0 || kl < -1 || kl > int64(len(b)-n) {
			return at, src, errCorrupt
		}
		b = b[n:]
	}
	if kl >= 0 {
		src.Key, b = b[:kl:kl], b[kl:]
	}
	src.Value = b
	return time.UnixMilli(ms), src, nil
}

// heldBytes reads one uvarint-length-prefixed field of a held wrapper.
func heldBytes(b []byte) (field, rest []byte, err error) {
	l, n := binary.Uvarint(b)
	if n <= 0 || l > uint64(len(b)-n) { // compared unsigned: a huge length must not wrap
		return nil, nil, errCorrupt
	}
	b = b[n:]
	return b[:l:l], b[l:], nil
}
