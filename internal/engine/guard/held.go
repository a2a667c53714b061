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

// encodeHeld is the stored wrapper of a held event: when it was held, its
// offset, key (length -1: nil) and value; DecodeHeld reads it.
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
