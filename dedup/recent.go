package dedup

import (
	"encoding/binary"
	"time"
)

// Recent is a bounded front cache of committed marks: the ids marked most
// recently, first in first out, with a fingerprint prefix and the mark time.
// A duplicate that arrives while its original is still here is answered
// without a store read (a random Pebble read per duplicate otherwise).
//
// It must hold committed marks only – an aborted mark would turn the
// redelivered event into a duplicate – so the owner adds marks after their
// transaction committed. It is not safe for concurrent use: the owner adds
// (commit hooks) and checks (processing) on goroutines that never overlap.
type Recent struct {
	m    map[ID]recentEntry
	ring []ID
	next int
}

type recentEntry struct {
	fp uint64 // the fingerprint's first 8 bytes
	at int64  // mark time, unix ms
}

// NewRecent returns a cache of at most n ids (nil when n ≤ 0: no cache).
func NewRecent(n int) *Recent {
	if n <= 0 {
		return nil
	}
	return &Recent{m: make(map[ID]recentEntry, n), ring: make([]ID, 0, n)}
}

// Add records a committed mark, evicting the oldest when full.
func (r *Recent) Add(id ID, fp [32]byte, at time.Time) {
	if r == nil {
		return
	}
	if len(r.ring) < cap(r.ring) {
		r.ring = append(r.ring, id)
	} else {
		delete(r.m, r.ring[r.next])
		r.ring[r.next] = id
		r.next = (r.next + 1) % len(r.ring)
	}
	r.m[id] = recentEntry{fp: binary.BigEndian.Uint64(fp[:8]), at: at.UnixMilli()}
}

// Check answers from the cache: known is false when id is not here (or its
// mark has expired), and the store must be asked. A known id is a Duplicate
// when the fingerprint prefixes match, a Conflict otherwise (a different
// event under the same id agreeing on 64 bits by chance is ignored).
func (r *Recent) Check(id ID, fp [32]byte, now time.Time, retention time.Duration) (v Verdict, known bool) {
	if r == nil {
		return New, false
	}
	e, ok := r.m[id]
	if !ok || now.UnixMilli()-e.at > retention.Milliseconds() { // as Store.live
		return New, false
	}
	if e.fp == binary.BigEndian.Uint64(fp[:8]) {
		return Duplicate, true
	}
	return Conflict, true
}

// Len is the number of ids held.
func (r *Recent) Len() int {
	if r == nil {
		return 0
	}
	return len(r.m)
}
