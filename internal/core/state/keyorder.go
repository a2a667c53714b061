package state

import (
	"slices"
	"strings"
)

// keyOrder returns the indices of ws in ascending key order (bytewise, as
// Pebble orders keys). Txn.write inserts a batch in that order.
//
// It is a radix sort over the keys' 8-byte words, most significant word
// first, because a comparison sort's cost is in its comparisons: the keys of
// a task batch share the task prefix, and its aggregate keys share the
// projection's name after it, so every comparison walks those bytes again,
// through an index into ws. Here each key's word at a depth is loaded once
// and sorted as an integer, least significant byte first (a pass per byte
// that is not the same in every word). Keys whose words are equal share the
// word's 8 bytes; those longer than the word are sorted by the next word,
// those that end inside it are prefixes of each other and of the rest of
// the run, so they come first, shortest first. Runs of few keys are sorted
// by comparison.
func keyOrder(ws []committedWrite) []int32 {
	items := make([]wordItem, len(ws))
	for i := range items {
		items[i].i = int32(i)
	}
	if len(ws) > 1 {
		d := commonPrefixLen(ws)
		sortByWord(ws, items, make([]wordItem, len(ws)), d)
	}
	order := make([]int32, len(ws))
	for i, it := range items {
		order[i] = it.i
	}
	return order
}

// wordItem is a key's index in ws and its word at the depth being sorted.
type wordItem struct {
	word uint64
	i    int32
}

// smallRun is the run length below which a run is sorted by comparison.
const smallRun = 24

// commonPrefixLen is the length of a prefix every key in ws shares: most
// keys have the whole prefix found so far (one memory comparison each).
func commonPrefixLen(ws []committedWrite) int {
	p := ws[0].key
	for _, w := range ws[1:] {
		if strings.HasPrefix(w.key, p) {
			continue
		}
		i := 0
		for i < len(p) && i < len(w.key) && p[i] == w.key[i] {
			i++
		}
		p = p[:i]
	}
	return len(p)
}

// sortByWord sorts items by their keys. Every key is at least d bytes long,
// and all share their first d bytes; tmp is scratch of len(items).
func sortByWord(ws []committedWrite, items, tmp []wordItem, d int) {
	if len(items) <= smallRun {
		insertionSort(ws, items, d)
		return
	}
	for j := range items {
		items[j].word = wordAt(ws[items[j].i].key, d)
	}
	radixSortWords(items, tmp)
	for start := 0; start < len(items); {
		end := start + 1
		for end < len(items) && items[end].word == items[start].word {
			end++
		}
		if end-start > 1 {
			sortEqualWords(ws, items[start:end], tmp[start:end], d)
		}
		start = end
	}
}

// sortEqualWords orders a run of keys whose words at d are equal: the keys
// that end within the word first, by length, then the longer ones by what
// follows the word.
func sortEqualWords(ws []committedWrite, run, tmp []wordItem, d int) {
	short := 0
	for j := range run {
		if len(ws[run[j].i].key) < d+8 {
			run[short], run[j] = run[j], run[short]
			short++
		}
	}
	if short > 1 {
		// Keys are distinct, and these are prefixes of one another (at
		// most 8 of them): compared past d, the shorter comes first.
		insertionSort(ws, run[:short], d)
	}
	if len(run)-short > 1 {
		sortByWord(ws, run[short:], tmp[short:], d+8)
	}
}

// wordAt is the 8 bytes of k from d, big-endian, zero-padded past k's end.
func wordAt(k string, d int) uint64 {
	if len(k) >= d+8 {
		k = k[d : d+8]
		return uint64(k[0])<<56 | uint64(k[1])<<48 | uint64(k[2])<<40 | uint64(k[3])<<32 |
			uint64(k[4])<<24 | uint64(k[5])<<16 | uint64(k[6])<<8 | uint64(k[7])
	}
	var w uint64
	for j := range 8 {
		w <<= 8
		if d+j < len(k) {
			w |= uint64(k[d+j])
		}
	}
	return w
}

// radixSortWords sorts items by word, stably, a byte at a time from the
// least significant; a byte that is the same in every word takes no pass.
func radixSortWords(items, tmp []wordItem) {
	var counts [8][256]int32
	for _, it := range items {
		w := it.word
		for b := range 8 {
			counts[b][byte(w>>(8*b))]++
		}
	}
	n := int32(len(items))
	src, dst := items, tmp
	for b := range 8 {
		c := &counts[b]
		if c[byte(src[0].word>>(8*b))] == n {
			continue // one value in every word
		}
		var pos [256]int32
		sum := int32(0)
		for v := range 256 {
			pos[v] = sum
			sum += c[v]
		}
		shift := 8 * b
		for _, it := range src {
			v := byte(it.word >> shift)
			dst[pos[v]] = it
			pos[v]++
		}
		src, dst = dst, src
	}
	if &src[0] != &items[0] {
		copy(items, src)
	}
}

// insertionSort sorts a short run by comparison of the keys past d.
func insertionSort(ws []committedWrite, items []wordItem, d int) {
	for a := 1; a < len(items); a++ {
		for b := a; b > 0 && strings.Compare(ws[items[b].i].key[d:], ws[items[b-1].i].key[d:]) < 0; b-- {
			items[b], items[b-1] = items[b-1], items[b]
		}
	}
}

// insertInOrder inserts index i into order, the indices of ws in key order,
// where ws[i]'s key belongs (a binary search: for a few keys sorted apart).
func insertInOrder(ws []committedWrite, order []int32, i int32) []int32 {
	at, _ := slices.BinarySearchFunc(order, ws[i].key, func(j int32, k string) int { return strings.Compare(ws[j].key, k) })
	return slices.Insert(order, at, i)
}
