package guard

import (
	"encoding/binary"
	"time"
)

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

// heldKey is the key of the held event of version under prefix (HeldPrefix):
// big-endian, so that a scan returns the held events in version order.
func heldKey(prefix []byte, version int64) []byte {
	return binary.BigEndian.AppendUint64(append(make([]byte, 0, len(prefix)+8), prefix...), uint64(version))
}

// heldTraced, in place of a held wrapper's key length, says that the trace
// context comes first (traceparent and tracestate, each a uvarint length
// and its bytes), then the key length as without it. A wrapper without a
// trace context is unchanged, byte for byte, from the format before traces
// were carried, so state written by an older version decodes as before; a
// wrapper with one does not decode in an older version (a downgrade with
// traced events held dead-letters them as corrupt: docs/contract.md#trace-context).
const heldTraced = -2

// encodeHeld is the stored wrapper of a held event: when it was held, its
// offset, its trace context when it has one (heldTraced), key (length -1:
// nil) and value; DecodeHeld reads it.
func encodeHeld(at time.Time, src Source) []byte {
	b := make([]byte, 0, 32+len(src.TraceParent)+len(src.TraceState)+len(src.Key)+len(src.Value))
	b = binary.AppendVarint(b, at.UnixMilli())
	b = binary.AppendVarint(b, src.Offset)
	if src.TraceParent != nil {
		b = binary.AppendVarint(b, heldTraced)
		b = binary.AppendUvarint(b, uint64(len(src.TraceParent)))
		b = append(b, src.TraceParent...)
		b = binary.AppendUvarint(b, uint64(len(src.TraceState)))
		b = append(b, src.TraceState...)
	}
	if src.Key == nil {
		b = binary.AppendVarint(b, -1)
	} else {
		b = binary.AppendVarint(b, int64(len(src.Key)))
		b = append(b, src.Key...)
	}
	return append(b, src.Value...)
}
