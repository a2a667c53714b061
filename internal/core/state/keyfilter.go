package state

import (
	"sync"
	"sync/atomic"
)

// keyFilter is a Bloom filter over every key the store may hold (of the keys
// Options.Cached selects): the keys found by a scan at open plus every key
// written since. Get consults it first,
// so a read of a key that was never written – a new aggregate, a new event id –
// is answered without Pebble, which would otherwise search the memtables and
// the filter and index blocks of every level. Deletions are not removed (a
// superset is all a negative answer needs).
//
// It grows by layers: when the newest layer holds what it was sized for, a
// layer twice as large is added, so the false-positive rate stays bounded
// without ever rebuilding. Until the opening scan is complete, MayContain
// answers true (no filtering).
//
// Bits are set and read atomically: the commit goroutine adds while readers
// on other goroutines check. A key's bits are set before its batch is
// committed, so a reader never sees the value in Pebble without the bits.
//
// A layer counts the keys that set at least one new bit, so adding a key
// again (every commit of a hot aggregate, the opening scan, a restore) does
// not use up its capacity.
type keyFilter struct {
	complete atomic.Bool
	mu       sync.Mutex // serialises adds that may grow the layers
	layers   atomic.Pointer[[]*filterLayer]
}

type filterLayer struct {
	bits []atomic.Uint64
	m    uint64 // number of bits
	n    atomic.Int64
	cap  int64
}

// bitsPerKey and probes give a false-positive rate of about 0.2% per layer.
const (
	bitsPerKey     = 16
	probes         = 5
	firstLayerKeys = 1 << 20
)

func newKeyFilter() *keyFilter { return newKeyFilterSized(firstLayerKeys) }

func newKeyFilterSized(firstKeys int64) *keyFilter {
	f := &keyFilter{}
	ls := []*filterLayer{newFilterLayer(firstKeys)}
	f.layers.Store(&ls)
	return f
}

func newFilterLayer(keys int64) *filterLayer {
	m := uint64(keys * bitsPerKey)
	return &filterLayer{bits: make([]atomic.Uint64, (m+63)/64), m: m, cap: keys}
}

// split makes the two halves of the double hashing scheme from a key's hash
// (keyHash).
func split(h uint64) (uint64, uint64) { return h, h>>32 | h<<32 | 1 }

// add sets the key's bits and counts it if any of them was new.
func (l *filterLayer) add(h1, h2 uint64) {
	fresh := false
	for i := range uint64(probes) {
		b := (h1 + i*h2) % l.m
		mask := uint64(1) << (b % 64)
		w := &l.bits[b/64]
		// A key added again (every commit of a hot aggregate) finds its
		// bits set: a load leaves the cache line shared and costs a
		// fraction of the read-modify-write (a CAS loop) that Or is.
		if w.Load()&mask == 0 && w.Or(mask)&mask == 0 {
			fresh = true
		}
	}
	if fresh {
		l.n.Add(1)
	}
}

func (l *filterLayer) has(h1, h2 uint64) bool {
	for i := range uint64(probes) {
		b := (h1 + i*h2) % l.m
		if l.bits[b/64].Load()&(1<<(b%64)) == 0 {
			return false
		}
	}
	return true
}

// Add records that key may be stored.
func (f *keyFilter) Add(key []byte) { f.add(keyHash(key)) }

// add is Add by the key's hash (keyHash).
func (f *keyFilter) add(h uint64) {
	h1, h2 := split(h)
	ls := *f.layers.Load()
	last := ls[len(ls)-1]
	if last.n.Load() >= last.cap {
		f.mu.Lock()
		ls = *f.layers.Load()
		last = ls[len(ls)-1]
		if last.n.Load() >= last.cap {
			grown := append(ls[:len(ls):len(ls)], newFilterLayer(2*last.cap))
			f.layers.Store(&grown)
			last = grown[len(grown)-1]
		}
		f.mu.Unlock()
	}
	last.add(h1, h2)
}

// MayContain is false only if key was never added (and the opening scan is
// complete).
func (f *keyFilter) MayContain(key []byte) bool { return f.mayContain(keyHash(key)) }

// mayContain is MayContain by the key's hash (keyHash).
func (f *keyFilter) mayContain(h uint64) bool {
	if !f.complete.Load() {
		return true
	}
	h1, h2 := split(h)
	for _, l := range *f.layers.Load() {
		if l.has(h1, h2) {
			return true
		}
	}
	return false
}
