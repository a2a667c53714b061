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

// blockWords is the words of a block: 512 bits, one 64-byte cache line. An
// id's four probes all fall in one block (a blocked Bloom filter), so an Add
// or a MayContain waits on one line of memory instead of four: the filter
// of a task with a million ids is megabytes, far beyond the caches. The
// price is a false-positive rate a little above an unblocked filter's of
// the same size (TestFilter: under 1% when full).
const blockWords = 8

// NewFilter returns a filter sized for expected ids (with room to double).
func NewFilter(expected int) *Filter {
	m := max(2*expected*bitsPerID, minFilterBits)
	words := (m + 64*blockWords - 1) / (64 * blockWords) * blockWords
	return &Filter{bits: make([]uint64, words)}
}

// block is id's block. The id is a SHA-256 prefix: its bytes are already
// uniform, so its first four bytes choose the block and the next 36 bits
// the four probes in it (probe).
func (f *Filter) block(id ID) *[blockWords]uint64 {
	n := uint64(len(f.bits) / blockWords)
	b := uint64(binary.LittleEndian.Uint32(id[0:4])) * n >> 32 // in [0, n): no division
	return (*[blockWords]uint64)(f.bits[b*blockWords:])
}

// probe is the word and bit of id's probe i (0–3) in its block.
func probe(id ID, i int) (word int, bit uint64) {
	p := binary.LittleEndian.Uint64(id[4:12]) >> (9 * i) & 511
	return int(p / 64), 1 << (p % 64)
}

// Add records id.
func (f *Filter) Add(id ID) {
	blk := f.block(id)
	for i := range 4 {
		w, b := probe(id, i)
		blk[w] |= b
	}
	f.n++
}

// MayContain is false only if id was never added.
func (f *Filter) MayContain(id ID) bool {
	blk := f.block(id)
	for i := range 4 {
		if w, b := probe(id, i); blk[w]&b == 0 {
			return false
		}
	}
	return true
}

// Full reports that the filter holds more ids than it was sized for; rebuild
// it (larger) from the store.
func (f *Filter) Full() bool { return f.n*bitsPerID > len(f.bits)*64 }

// BuildFilter builds a filter over every entry stored for the task.
func BuildFilter(scan ScanFunc, taskPrefix []byte) (*Filter, error) {
	sc, err := scanEntries(scan, taskPrefix)
	if err != nil {
		return nil, err
	}
	return sc.filter(), nil
}

// entryScan is what a scan of a task's entries found: their ids, the
// epochs they fall in (ascending) and whether any is of the earlier
// layouts.
type entryScan struct {
	ids    []ID
	epochs []int64
	legacy bool
}

// filter is a filter over the scan's ids.
func (sc *entryScan) filter() *Filter {
	f := NewFilter(len(sc.ids))
	for _, id := range sc.ids {
		f.Add(id)
	}
	return f
}

// scanEntries reads every entry stored for the task, of both layouts.
func scanEntries(scan ScanFunc, taskPrefix []byte) (entryScan, error) {
	var sc entryScan
	legacy := Prefix(taskPrefix)
	err := scan(legacy, func(k, _ []byte) error {
		if len(k) == len(legacy)+len(ID{}) {
			sc.ids = append(sc.ids, ID(k[len(legacy):]))
			sc.legacy = true
		}
		return nil
	})
	if err != nil {
		return entryScan{}, err
	}
	err = scan(EpochPrefix(taskPrefix), func(k, _ []byte) error {
		end, id, ok := parseEpochKey(k, taskPrefix)
		if !ok {
			return nil
		}
		if n := len(sc.epochs); n == 0 || sc.epochs[n-1] != end {
			sc.epochs = append(sc.epochs, end)
		}
		sc.ids = append(sc.ids, id)
		return nil
	})
	if err != nil {
		return entryScan{}, err
	}
	return sc, nil
}
