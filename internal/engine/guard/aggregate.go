package guard

import (
	"encoding/binary"
	"errors"

	"github.com/projector-dev/projector/projection"
)

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

// encode returns key and the record, for KV.Set (which keeps both), in one
// new allocation of their exact size, the key first: a read of the record
// compares the key first (the store's value cache), so the key's cache line
// brings in the record's start.
func (s *aggState) encode(key []byte) (k, rec []byte) {
	var h [maxAggHeader]byte
	hdr := s.appendHeader(h[:0])
	b := make([]byte, 0, len(key)+len(hdr)+len(s.inline)+len(s.doc))
	b = append(b, key...)
	b = append(b, hdr...)
	b = append(b, s.inline...)
	b = append(b, s.doc...)
	return b[:len(key):len(key)], b[len(key):]
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

// decodeAgg decodes a stored aggregate record (either format). The inline
// event and the document alias b.
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

// appendAggregateKey appends AggregateKey to k (Offer builds it in its
// scratch space, without an allocation of its own).
func appendAggregateKey(k, taskPrefix []byte, projection, aggregate string) []byte {
	k = append(k, taskPrefix...)
	k = append(k, KindAggregate)
	k = binary.AppendUvarint(k, uint64(len(projection)))
	k = append(k, projection...)
	return append(k, aggregate...)
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

// advance moves st to the next version as res says; the new state is
// res.State itself, not a copy.
func (st *aggState) advance(res projection.Result) {
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
