package schemaregistry

import (
	"container/list"
	"context"
	"errors"
	"sync"
)

// cache holds the decoders of at most max schema ids, least recently used
// out first. A schema that does not parse is cached as its *InvalidError
// (schemas are immutable per id); an unavailable registry is not cached,
// so the next call asks again. Concurrent misses on one id wait for one
// load.
type cache struct {
	mu       sync.Mutex
	max      int
	items    map[int]*list.Element // of *entry
	lru      *list.List            // front: most recently used
	inflight map[int]*call
	waiters  int // callers waiting for another's load (tests wait on it)
}

type entry struct {
	id  int
	d   decoder
	err *InvalidError
}

// call is one load in flight; done is closed when d, err are set.
type call struct {
	done chan struct{}
	d    decoder
	err  error
}

func newCache(max int) *cache {
	return &cache{max: max, items: map[int]*list.Element{}, lru: list.New(), inflight: map[int]*call{}}
}

// waiting is the number of callers waiting for another's load.
func (c *cache) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waiters
}

// len is the number of ids cached.
func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// get returns id's decoder, loading it on a miss. The load runs on the
// caller that missed first, with its context; the others wait for it or
// for their own context.
func (c *cache) get(ctx context.Context, id int, load func(context.Context, int) (decoder, error)) (decoder, error) {
	c.mu.Lock()
	if el, ok := c.items[id]; ok {
		c.lru.MoveToFront(el)
		e := el.Value.(*entry)
		c.mu.Unlock()
		if e.err != nil {
			return nil, e.err
		}
		return e.d, nil
	}
	if cl, ok := c.inflight[id]; ok {
		c.waiters++
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			c.waiters--
			c.mu.Unlock()
		}()
		select {
		case <-cl.done:
			return cl.d, cl.err
		case <-ctx.Done():
			return nil, errors.Join(ErrUnavailable, ctx.Err())
		}
	}
	cl := &call{done: make(chan struct{})}
	c.inflight[id] = cl
	c.mu.Unlock()

	cl.d, cl.err = load(ctx, id)

	c.mu.Lock()
	delete(c.inflight, id)
	var invalid *InvalidError
	if cl.err == nil || errors.As(cl.err, &invalid) {
		c.put(&entry{id: id, d: cl.d, err: invalid})
	}
	c.mu.Unlock()
	close(cl.done)
	return cl.d, cl.err
}

// put adds e, evicting the least recently used entry when full. c.mu is
// held.
func (c *cache) put(e *entry) {
	c.items[e.id] = c.lru.PushFront(e)
	for c.lru.Len() > c.max {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.items, old.Value.(*entry).id)
	}
}
