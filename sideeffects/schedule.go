package sideeffects

import (
	"container/heap"
	"time"
)

// schedule adds (key, due) to the schedule and wakes the dispatcher.
func (r *Runner) schedule(key string, due time.Time) {
	r.mu.Lock()
	heap.Push(&r.sched, item{key: key, due: due})
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// next pops a due key that no worker holds and marks it held; otherwise it
// returns how long to wait for the earliest one.
func (r *Runner) next() (string, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.cfg.Now()
	for r.sched.Len() > 0 {
		top := r.sched[0]
		if top.due.After(now) {
			return "", top.due.Sub(now)
		}
		heap.Pop(&r.sched)
		if r.active[top.key] {
			r.again[top.key] = true
			continue
		}
		r.active[top.key] = true
		return top.key, 0
	}
	return "", time.Hour
}

// release frees key; if it was enqueued meanwhile, it is looked at again.
func (r *Runner) release(key string) {
	r.mu.Lock()
	delete(r.active, key)
	again := r.again[key]
	delete(r.again, key)
	r.mu.Unlock()
	if again {
		r.Enqueue(key)
	}
}

type item struct {
	key string
	due time.Time
}

// schedule is a min-heap of keys by due time. It may hold a key more than
// once; the ledger decides what each pop means.
type schedule []item

func (s schedule) Len() int           { return len(s) }
func (s schedule) Less(i, j int) bool { return s[i].due.Before(s[j].due) }
func (s schedule) Swap(i, j int)      { s[i], s[j] = s[j], s[i] }
func (s *schedule) Push(x any)        { *s = append(*s, x.(item)) }
func (s *schedule) Pop() any {
	old := *s
	it := old[len(old)-1]
	*s = old[:len(old)-1]
	return it
}

// Backlog is how many keys wait for an attempt or are being executed.
func (r *Runner) Backlog() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sched) + len(r.active)
}
