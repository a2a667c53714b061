package state

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkValueCacheGet looks up random keys of a full value cache of the
// default size (2^18 entries) and reads each value's first bytes, as the
// guard does (decodeAgg): the per-event read of a hot aggregate, whose cost
// is memory latency. Keys are shaped like the processor's aggregate keys (a
// task prefix, the projection's name, an aggregate id: 49 bytes), values
// like its records (120 bytes). "adjacent": key and value in one
// allocation, the key first, as the guard stages them and Store.Get caches
// them; "apart": each in an allocation of its own, made at other times.
func BenchmarkValueCacheGet(b *testing.B) {
	const n = 1 << 18
	key := func(dst []byte, i int32) []byte {
		return fmt.Appendf(dst, "t\x00\x0ebench-events-1\x00\x00\x00\x02a\x0dcase-overviewCASE-%06d", i)
	}
	fill := map[string]func(c *valueCache){
		"adjacent": func(c *valueCache) {
			for i := range int32(n) {
				kv := key(nil, i)
				klen := len(kv)
				kv = append(kv, make([]byte, 120)...)
				kv[klen] = 1
				c.put(keyHash(kv[:klen]), ownedKey(kv[:klen]), kv[klen:])
			}
		},
		"apart": func(c *valueCache) {
			vals := make([][]byte, n)
			for i := range vals {
				vals[i] = make([]byte, 120)
				vals[i][0] = 1
			}
			rand.New(rand.NewPCG(5, 6)).Shuffle(n, func(i, j int) { vals[i], vals[j] = vals[j], vals[i] })
			for i := range int32(n) {
				k := key(nil, i)
				c.put(keyHash(k), string(k), vals[i])
			}
		},
	}
	for _, layout := range []string{"adjacent", "apart"} {
		b.Run(layout, func(b *testing.B) {
			c := newValueCache(0)
			fill[layout](c)
			rng := rand.New(rand.NewPCG(3, 4))
			// Each lookup copies a key made beforehand into a buffer and
			// hashes it, as the guard builds and hashes its key: the key's
			// bytes are in the CPU's cache, the entry's are not.
			keys := make([][]byte, 1<<16)
			for i := range keys {
				keys[i] = key(nil, int32(rng.IntN(n)))
			}
			read, i := 0, 0
			buf := make([]byte, 0, 64)
			for b.Loop() {
				buf = append(buf[:0], keys[i&(len(keys)-1)]...)
				if v, ok := c.get(keyHash(buf), buf); ok {
					read += int(v[0])
				}
				i++
			}
			if read < i*9/10 {
				b.Fatalf("%d values read of %d lookups", read, i)
			}
		})
	}
}
