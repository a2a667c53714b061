package dedup

import "encoding/binary"

// Filter is an in-memory Bloom filter over the ids of one task, so that a
// new event id (the common case) is known to be new without a Pebble lookup.
// It may only ever err towards "maybe present": ids are added when marked,
// even in a transaction that later aborts (a false positive costs one Get),
// and it is rebuilt from the store whenever a restore brought in entries.
type Filter struct {
	bits []uint64
	n    int
}

// minFilterBits keeps small tasks from rebuilding often.
const minFilterBits = 1 << 23

// bitsPerID is sized for a false-positive rate well under 1% with 4 probes.
const bitsPerID = 16

// NewFilter returns a filter sized for expected ids (with room to double).
func NewFilter(expected int) *Filter {
	m := max(2*expected*bitsPerID, minFilterBits)
	return &Filter{bits: make([]uint64, (m+63)/64)}
}

// The id is a SHA-256 prefix: its bytes are already uniform, so four 32-bit
// slices serve as the four probe hashes.
func (f *Filter) probes(id ID, fn func(bit uint64) bool) bool {
	m := uint64(len(f.bits) * 64)
	for i := 0; i < 4; i++ {
		if !fn(uint64(binary.LittleEndian.Uint32(id[4*i:])) % m) {
			return false
		}
	}
	return true
}

// Add records id.
func (f *Filter) Add(id ID) {
	f.probes(id, func(b uint64) bool { f.bits[b/64] |= 1 << (b % 64); return true })
	f.n++
}

// MayContain is false only if id was never added.
func (f *Filter) MayContain(id ID) bool {
	return f.probes(id, func(b uint64) bool { return f.bits[b/64]&(1<<(b%64)) != 0 })
}

// Full reports that the filter holds more ids than it was sized for; rebuild
// it (larger) from the store.
func (f *Filter) Full() bool { return f.n*bitsPerID > len(f.bits)*64 }

// BuildFilter builds a filter over every entry stored for the task.
func BuildFilter(scan func(prefix []byte, fn func(k, v []byte) error) error, taskPrefix []byte) (*Filter, error) {
	prefix := Prefix(taskPrefix)
	var ids []ID
	err := scan(prefix, func(k, _ []byte) error {
		if len(k) == len(prefix)+len(ID{}) {
			var id ID
			copy(id[:], k[len(prefix):])
			ids = append(ids, id)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	f := NewFilter(len(ids))
	for _, id := range ids {
		f.Add(id)
	}
	return f, nil
}
