package state

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkValueCacheGet looks up random keys of a full value cache of the
// default size (2^18 entries), keys shaped like the processor's aggregate
// keys (a task prefix, the projection's name, an aggregate id: 49 bytes):
// the per-event read of a hot aggregate, whose cost is memory latency.
func BenchmarkValueCacheGet(b *testing.B) {
	c := newValueCache(0)
	const n = 1 << 18
	key := func(dst []byte, i int32) []byte {
		return fmt.Appendf(dst, "t\x00\x0ebench-events-1\x00\x00\x00\x02a\x0dcase-overviewCASE-%06d", i)
	}
	for i := range int32(n) {
		k := key(nil, i)
		c.put(keyHash(k), string(k), make([]byte, 120))
	}
	rng := rand.New(rand.NewPCG(3, 4))
	idx := make([]int32, 1<<16)
	for i := range idx {
		idx[i] = int32(rng.IntN(n))
	}
	// The key is built and hashed per lookup, as the guard does: in cache.
	keys := make([][]byte, len(idx))
	for i, j := range idx {
		keys[i] = key(nil, j)
	}
	hits := 0
	i := 0
	buf := make([]byte, 0, 64)
	for b.Loop() {
		buf = append(buf[:0], keys[i&(len(idx)-1)]...)
		if v, ok := c.get(keyHash(buf), buf); ok {
			hits += len(v) / 120
		}
		i++
	}
	if hits < b.N*9/10 {
		b.Fatalf("%d hits of %d lookups", hits, b.N)
	}
}
