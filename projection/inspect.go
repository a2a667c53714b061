package projection

import (
	"encoding/binary"
	"time"
)

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
	if w <= 0 || len(k) < w+int(n) {
		return "", "", errCorrupt
	}
	return string(k[w : w+int(n)]), string(k[w+int(n):]), nil
}
