package state

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestKeyOrder checks keyOrder against a comparison sort on key sets that
// take each of its paths: runs long and short, keys that share whole words,
// keys that end inside a word and are prefixes of others, zero bytes that
// look like a word's padding, and the processor's shape (a task prefix, then
// random dedup ids and aggregate keys that share a projection's name).
func TestKeyOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	randBytes := func(n int, alphabet string) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	cases := map[string]func() []string{
		"processor shape": func() []string {
			prefix := "\x00\x0bcase-events\x00\x00\x00\x03"
			var ks []string
			for n := range 5000 {
				d := binary.BigEndian.AppendUint64([]byte(prefix+"d"), rng.Uint64())
				ks = append(ks, string(binary.BigEndian.AppendUint64(d, rng.Uint64())))
				ks = append(ks, prefix+"a\x0dcase-overviewCASE-"+randBytes(6, "0123456789")+strings.Repeat("x", n%3))
			}
			return append(ks, prefix+"o")
		},
		"prefixes and zero bytes": func() []string {
			var ks []string
			for range 3000 {
				ks = append(ks, "p"+randBytes(rng.IntN(20), "\x00\x01\xff"))
			}
			return ks
		},
		"one key a prefix of all": func() []string {
			ks := []string{"k"}
			for range 100 {
				ks = append(ks, "k"+randBytes(1+rng.IntN(30), "ab\x00"))
			}
			return ks
		},
		"short": func() []string { return []string{"b", "a", "ab", "a\x00", ""} },
		"one":   func() []string { return []string{"only"} },
		"none":  func() []string { return nil },
		"random lengths": func() []string {
			var ks []string
			for range 2000 {
				ks = append(ks, randBytes(rng.IntN(40), "\x00abc\xfe"))
			}
			return ks
		},
	}
	for name, gen := range cases {
		t.Run(name, func(t *testing.T) {
			ks := gen()
			slices.Sort(ks)
			ks = slices.Compact(ks) // a txn's keys are distinct
			rng.Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
			ws := make([]committedWrite, len(ks))
			for i, k := range ks {
				ws[i].key = k
			}
			// The first keys by the radix sort, the last few inserted
			// one by one, as Txn.write does with its offsets' keys.
			apart := min(len(ks), 3)
			order := keyOrder(ws[:len(ws)-apart])
			for i := len(ws) - apart; i < len(ws); i++ {
				order = insertInOrder(ws, order, int32(i))
			}
			if len(order) != len(ks) {
				t.Fatalf("%d indices for %d keys", len(order), len(ks))
			}
			got := make([]string, len(order))
			for i, j := range order {
				got[i] = ks[j]
			}
			want := slices.Sorted(slices.Values(ks))
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("position %d of %d: got %q, want %q", i, len(want), got[i], want[i])
				}
			}
		})
	}
}

// BenchmarkKeyOrder orders a task batch of the processor's shape (5,000
// events: a dedup entry under a random id and an aggregate key each, below
// one task prefix, then the task's offset key) as Txn.write does (the
// radix sort of the state writes, the offset key inserted), with the radix
// sort of every key, and with the comparison sort of indices it replaced
// (the reference).
func BenchmarkKeyOrder(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	prefix := "t\x00\x0bcase-events\x00\x00\x00\x03"
	var ws []committedWrite
	for range 5000 {
		d := binary.BigEndian.AppendUint64([]byte(prefix+"d"), rng.Uint64())
		ws = append(ws, committedWrite{key: string(binary.BigEndian.AppendUint64(d, rng.Uint64()))})
		a := binary.BigEndian.AppendUint64([]byte(prefix+"a\x0dcase-overview"), uint64(rng.IntN(100_000)))
		ws = append(ws, committedWrite{key: string(a)})
	}
	rng.Shuffle(len(ws), func(i, j int) { ws[i], ws[j] = ws[j], ws[i] })
	ws = append(ws, committedWrite{key: "o\x00\x0bcase-events\x00\x00\x00\x03"})
	state := len(ws) - 1
	b.Run("write", func(b *testing.B) {
		for b.Loop() {
			insertInOrder(ws, keyOrder(ws[:state]), int32(state))
		}
	})
	b.Run("radix", func(b *testing.B) {
		for b.Loop() {
			keyOrder(ws)
		}
	})
	b.Run("comparison", func(b *testing.B) {
		for b.Loop() {
			order := make([]int32, len(ws))
			for i := range order {
				order[i] = int32(i)
			}
			slices.SortFunc(order, func(a, b int32) int { return strings.Compare(ws[a].key, ws[b].key) })
		}
	})
}
