package eos

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/state"
)

// taskWork is one task's records in a transaction.
type taskWork struct {
	b    *Batch
	recs []*kgo.Record
}

// processAll hands every polled record to the handler, task by task, then
// produces each task's changelog records. With Config.Parallel, tasks are
// processed concurrently (each task's records in order, on one goroutine):
// tasks share no state (decision 001), and each has its own Batch.
func (l *Loop[T]) processAll(b *Batch, fetches kgo.Fetches) error {
	var work []taskWork
	at := map[state.Task]int{}
	fetches.EachPartition(func(fp kgo.FetchTopicPartition) {
		id := state.Task{Topic: fp.Topic, Partition: fp.Partition}
		t, ok := l.tasks[id]
		if !ok || len(fp.Records) == 0 {
			// Nothing to process, or revoked since the poll: then the
			// session aborts this transaction and its records come
			// back to the new owner.
			return
		}
		i, ok := at[id]
		if !ok {
			i = len(work)
			at[id] = i
			work = append(work, taskWork{b: b.For(t.Task)})
		}
		work[i].recs = append(work[i].recs, fp.Records...)
	})
	// Task batches that Begin used but no record reaches.
	var idle []*Batch
	for _, c := range b.tx.children {
		if _, ok := at[c.task.ID]; !ok {
			idle = append(idle, c)
		}
	}
	ferr := l.eachTask(len(work), func(i int, stop *atomic.Bool) error {
		w := work[i]
		for _, r := range w.recs {
			if stop.Load() {
				return nil
			}
			if err := w.b.task.h.Process(w.b, r); err != nil {
				return err
			}
		}
		return l.stage(w.b)
	})
	if ferr != nil {
		return ferr
	}
	for _, c := range idle {
		if err := l.stage(c); err != nil {
			return err
		}
	}
	return nil
}

// eachTask runs fn(i) for i in [0, n): one after another on the loop's
// goroutine, or with Config.Parallel on up to GOMAXPROCS goroutines that take
// the indexes in turn (tasks share no state, decision 001). The first error
// stops the others from taking more (fn may watch stop to end its own work
// early) and is returned.
func (l *Loop[T]) eachTask(n int, fn func(i int, stop *atomic.Bool) error) error {
	var (
		next atomic.Int64
		stop atomic.Bool
		emu  sync.Mutex
		ferr error
	)
	worker := func() {
		for {
			i := int(next.Add(1) - 1)
			if i >= n || stop.Load() {
				return
			}
			if err := fn(i, &stop); err != nil {
				stop.Store(true)
				emu.Lock()
				if ferr == nil {
					ferr = err
				}
				emu.Unlock()
				return
			}
		}
	}
	workers := 1
	if l.cfg.Parallel {
		workers = min(n, runtime.GOMAXPROCS(0))
	}
	if workers <= 1 {
		worker() // on the loop's goroutine
	} else {
		var wg sync.WaitGroup
		for range workers {
			wg.Go(worker)
		}
		wg.Wait()
	}
	return ferr
}

// stage ends a task batch's processing: the task handler's Stage, then its
// changelog records.
func (l *Loop[T]) stage(b *Batch) error {
	err := stageChangelog(b.task.h, l.cfg.ChangelogOf(b.task.ID.Topic), b)
	b.task.stagedHint = b.Txn.Len()
	return err
}

// stageChangelog runs h's Stage (h: the batch's task handler; nil: none)
// on a task batch, then produces the batch's staged state to topic as
// changelog records, one per key (local writes excepted).
func stageChangelog(h TaskHandler, topic string, b *Batch) error {
	if h != nil {
		h.Stage(b)
	}
	n := len(b.task.Prefix)
	// Records are allocated in blocks, not one by one (Len overcounts:
	// it includes local writes).
	var recs []kgo.Record
	var err error
	b.Txn.Each(func(key string, val []byte) {
		if err != nil {
			return
		}
		if len(key) < n || key[:n] != string(b.task.Prefix) {
			// A key of another task would restore into the wrong
			// partition's state: a handler bug, stop before it lands.
			err = fmt.Errorf("eos: task %s staged a key outside its prefix: %q", b.task.ID, key)
			return
		}
		// The staged key's bytes, not a copy: strings are immutable and
		// the producer only reads the key.
		k := unsafe.Slice(unsafe.StringData(key[n:]), len(key)-n)
		if len(recs) == cap(recs) {
			recs = make([]kgo.Record, 0, min(b.Txn.Len(), 512))
		}
		recs = append(recs, kgo.Record{Topic: topic, Partition: b.task.ID.Partition, Key: k, Value: val})
		b.tx.produce(&recs[len(recs)-1])
	})
	return err
}
