package state

import "testing"

// BenchmarkKeyFilterReAdd is the key filter's share of committing a hot
// aggregate again: adding a key whose bits are all set already, spread over
// a filter of a million keys (2 MiB, beyond the L2 cache).
func BenchmarkKeyFilterReAdd(b *testing.B) {
	f := newKeyFilter()
	const keys = 100_000
	hs := make([]uint64, keys)
	for i := range hs {
		hs[i] = keyHash([]byte{byte(i), byte(i >> 8), byte(i >> 16), 'a'})
		f.add(hs[i])
	}
	i := 0
	for b.Loop() {
		f.add(hs[i])
		if i++; i == keys {
			i = 0
		}
	}
}
