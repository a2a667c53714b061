package dedup

import "encoding/binary"

// Recent is a bounded front cache of committed marks: recently marked ids,
// with a fingerprint prefix and the mark time. A duplicate that arrives while
// its original is still here is answered without a store read (a random
// Pebble read per duplicate otherwise).
//
// It is a two-way set-associative table, not a map: an add or check touches
// one 64-byte bucket (one cache miss) and nothing is allocated or deleted. An
// id stays until two later ids land in its bucket; sized at twice the ids
// asked for, about three in four of the most recent n ids are still here
// after n more marks, and nearly all of the last n/2.
//
// It must hold committed marks only – an aborted mark would turn the
// redelivered event into a duplicate – so the owner adds marks after their
// transaction committed. It is not safe for concurrent use: the owner adds
// (commit hooks) and checks (processing) on goroutines that never overlap.
type Recent struct {
	slots []recentEntry // buckets of recentWays entries, newest first
	mask  uint64        // bucket count - 1
}

// recentEntry is 32 bytes: a bucket of two is one cache line. The zero id
// marks an unused entry (a SHA-256 prefix of zero does not occur).
type recentEntry struct {
	id ID
	fp uint64 // the fingerprint's first 8 bytes
	at int64  // mark time, unix ms
}

const recentWays = 2

// NewRecent returns a cache sized for the n most recent ids (nil when n ≤ 0:
// no cache).
func NewRecent(n int) *Recent {
	if n <= 0 {
		return nil
	}
	buckets := 1
	for buckets*recentWays < 2*n {
		buckets <<= 1
	}
	return &Recent{slots: make([]recentEntry, buckets*recentWays), mask: uint64(buckets - 1)}
}

// bucket is id's bucket. The id is a SHA-256 prefix: any 8 of its bytes are
// uniform.
func (r *Recent) bucket(id ID) *[recentWays]recentEntry {
	i := (binary.LittleEndian.Uint64(id[8:]) & r.mask) * recentWays
	return (*[recentWays]recentEntry)(r.slots[i : i+recentWays])
}

// AddStaged records the marks of a committed transaction's staged segments.
func (r *Recent) AddStaged(m *Marks) {
	if r == nil {
		return
	}
	m.eachStaged(r.add)
}

// add records a committed mark; the bucket's oldest entry makes room.
func (r *Recent) add(id ID, fp []byte, at int64) {
	b := r.bucket(id)
	e := recentEntry{id: id, fp: binary.BigEndian.Uint64(fp[:8]), at: at}
	if b[0].id == id {
		b[0] = e
		return
	}
	b[1], b[0] = b[0], e // an older entry for id in b[1] is overwritten too
}

// find returns id's mark time and whether its fingerprint prefix matches
// fp's; ok is false when id is not here (Partition.Check judges expiry).
func (r *Recent) find(id ID, fp [32]byte) (at int64, same, ok bool) {
	if r == nil {
		return 0, false, false
	}
	b := r.bucket(id)
	for i := range b {
		if e := &b[i]; e.id == id {
			return e.at, e.fp == binary.BigEndian.Uint64(fp[:8]), true
		}
	}
	return 0, false, false
}
