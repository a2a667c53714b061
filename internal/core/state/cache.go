package state

import (
	"hash/maphash"
	"sync"
)

// valueCache keeps recently committed or read values in memory, so that the
// per-event reads of hot aggregates skip Pebble's memtable and block cache.
// It holds committed values only (a commit updates it after the batch is
// durable; a restore forgets each key it writes), so a hit is exactly what
// Pebble would return.
// Eviction is arbitrary (Go's map order): cheap, and good enough for a cache
// whose working set is "aggregates touched recently".
//
// It is sharded by key hash, each shard with its own lock: tasks processed in
// parallel read it while the overlapped commit writes it.
type valueCache struct {
	shards []cacheShard
}

type cacheShard struct {
	mu  sync.Mutex
	m   map[uint64]cacheEntry // by the key's hash (keyHash)
	cap int
	_   [40]byte // keep shards' locks off one cache line
}

// cacheEntry keeps its key: two keys of one hash share a slot (the later
// wins) and a lookup of the other misses.
type cacheEntry struct {
	key string
	val []byte
}

const cacheShards = 16

// keySeed seeds keyHash.
var keySeed = maphash.MakeSeed()

// keyHash is a key's hash for the value cache and the key filter alike: a
// read or commit of a cached key hashes it once for both.
func keyHash(k []byte) uint64 { return maphash.Bytes(keySeed, k) }

func newValueCache(capacity int) *valueCache {
	if capacity == 0 {
		capacity = 1 << 18
	}
	if capacity < 0 {
		return &valueCache{}
	}
	c := &valueCache{shards: make([]cacheShard, cacheShards)}
	for i := range c.shards {
		per := max(1, capacity/cacheShards)
		c.shards[i] = cacheShard{m: make(map[uint64]cacheEntry), cap: per}
	}
	return c
}

func (c *valueCache) shard(h uint64) *cacheShard { return &c.shards[h%cacheShards] }

// get returns k's cached value; h is keyHash(k).
func (c *valueCache) get(h uint64, k []byte) ([]byte, bool) {
	if c.shards == nil {
		return nil, false
	}
	s := c.shard(h)
	s.mu.Lock()
	e, ok := s.m[h]
	s.mu.Unlock()
	if !ok || e.key != string(k) {
		return nil, false
	}
	return e.val, true
}

// put caches v as k's value; h is keyHash(k).
func (c *valueCache) put(h uint64, k string, v []byte) {
	if c.shards == nil {
		return
	}
	s := c.shard(h)
	s.mu.Lock()
	s.putLocked(h, k, v)
	s.mu.Unlock()
}

func (s *cacheShard) putLocked(h uint64, k string, v []byte) {
	if len(s.m) >= s.cap {
		if _, ok := s.m[h]; !ok {
			n := max(1, s.cap/8)
			for h := range s.m {
				delete(s.m, h)
				if n--; n <= 0 {
					break
				}
			}
		}
	}
	s.m[h] = cacheEntry{k, v}
}

// committed applies a commit's writes. With a selection of cached keys
// (Options.Cached, selective), the selected keys' values enter the cache and
// other keys are skipped (never cached); without, entries a read brought in
// are refreshed.
func (c *valueCache) committed(ws []committedWrite, selective bool) {
	if c.shards == nil {
		return
	}
	for _, w := range ws {
		if !w.valued {
			continue
		}
		h := w.hash
		s := c.shard(h)
		s.mu.Lock()
		switch {
		case w.val == nil:
			if e, ok := s.m[h]; ok && e.key == w.key {
				delete(s.m, h)
			}
		case selective:
			s.putLocked(h, w.key, w.val)
		default:
			if e, ok := s.m[h]; ok && e.key == w.key {
				s.m[h] = cacheEntry{w.key, w.val}
			}
		}
		s.mu.Unlock()
	}
}

func (c *valueCache) clear() {
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.Lock()
		clear(s.m)
		s.mu.Unlock()
	}
}
