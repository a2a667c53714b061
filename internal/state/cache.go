package state

import (
	"sync"
	"unsafe"
)

// valueCache keeps recently committed or read values in memory, so that the
// per-event reads of hot aggregates skip Pebble's memtable and block cache.
// It holds committed values only (Txn.Commit updates it after the batch is
// durable; restores clear it), so a hit is exactly what Pebble would return.
// Eviction is arbitrary (Go's map order): cheap, and good enough for a cache
// whose working set is "aggregates touched recently".
type valueCache struct {
	mu  sync.Mutex
	m   map[string][]byte
	cap int
}

func newValueCache(capacity int) *valueCache {
	if capacity == 0 {
		capacity = 1 << 18
	}
	if capacity < 0 {
		return &valueCache{}
	}
	return &valueCache{m: make(map[string][]byte, capacity), cap: capacity}
}

func (c *valueCache) get(k []byte) ([]byte, bool) {
	if c.cap == 0 {
		return nil, false
	}
	c.mu.Lock()
	v, ok := c.m[string(k)]
	c.mu.Unlock()
	return v, ok
}

func (c *valueCache) put(k string, v []byte) {
	if c.cap == 0 {
		return
	}
	c.mu.Lock()
	c.putLocked(k, v)
	c.mu.Unlock()
}

func (c *valueCache) putLocked(k string, v []byte) {
	if _, ok := c.m[k]; !ok && len(c.m) >= c.cap {
		n := c.cap / 8
		for k := range c.m {
			delete(c.m, k)
			if n--; n <= 0 {
				break
			}
		}
	}
	c.m[k] = v
}

// committed applies a commit's writes under one lock: values of hot keys
// (by changelog key) enter the cache; other keys only refresh an entry that
// a read brought in, so write-once keys (dedup marks) cannot evict the hot
// aggregates.
func (c *valueCache) committed(writes map[string]staged, hot func([]byte) bool) {
	if c.cap == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, w := range writes {
		if hot != nil && w.val != nil {
			kb := unsafe.Slice(unsafe.StringData(k), len(k)) // read only
			if ck, ok := ChangelogKey(kb); ok && hot(ck) {
				c.putLocked(k, w.val)
				continue
			}
		}
		if _, ok := c.m[k]; ok {
			if w.val == nil {
				delete(c.m, k)
			} else {
				c.m[k] = w.val
			}
		}
	}
}

func (c *valueCache) clear() {
	if c.cap == 0 {
		return
	}
	c.mu.Lock()
	clear(c.m)
	c.mu.Unlock()
}
