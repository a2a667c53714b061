package eos

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// readAll reads the changelog of every job that must read, one goroutine per
// task (at most restorer.parallel at a time), and hands each task to its
// handler's Restored as soon as its own read is done, on this goroutine:
// Restored calls stay one at a time, as the handler expects, while the next
// tasks' reads go on. The store is shared; restore writes of several tasks
// may commit concurrently (state.Store.Restore), each batch with its own
// task's offset.
//
// With one read at a time (the default, restoreParallel) every read uses the
// restorer's client. With more, the first goroutine does, and every other one
// reads with a client of its own, made from the same options and closed when
// its read ends: a kgo client's polls return whichever partitions have
// records, so two concurrent readers cannot share one.
//
// The first error cancels the other reads and is returned once they have
// stopped, except that an error after which the loop must stop (not
// transientError) wins over a transient one: a retry must not hide it.
func (r *restorer) readAll(ctx context.Context, jobs []taskRead, settle bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type done struct {
		j   taskRead
		n   int
		err error
	}
	results := make(chan done, len(jobs))
	parallel := cmp.Or(r.parallel, restoreParallel)
	sem := make(chan struct{}, parallel)
	pending, shared := 0, false
	for _, j := range jobs {
		if !j.read {
			results <- done{j: j, n: j.n}
			continue
		}
		pending++
		own := shared && parallel > 1 // the restorer's client goes to the first reader
		shared = true
		go func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			n, err := r.readWith(ctx, own, j)
			results <- done{j: j, n: n, err: err}
		}()
	}
	var first error
	for range jobs {
		d := <-results
		d.j.task.RestoredRecords += d.n
		err := d.err
		if err == nil && first == nil {
			if settle {
				d.j.task.verified = true
			}
			err = d.j.task.h.Restored()
		}
		if err != nil {
			first = worseRestoreErr(first, err)
			cancel()
		}
	}
	return first
}

// readWith is readTask with the restorer's client, or (own) with a client
// of its own.
func (r *restorer) readWith(ctx context.Context, own bool, j taskRead) (int, error) {
	if !own {
		return r.readTask(ctx, r.cl, j)
	}
	cl, err := kgo.NewClient(r.cl.Opts()...)
	if err != nil {
		return 0, fmt.Errorf("eos: restore %s: client: %w", j.id, err)
	}
	defer cl.Close()
	return r.readTask(ctx, cl, j)
}

// restoreParallel is how many tasks are read at once by default: one. The
// reads of several tasks at once interleave their keys in every memtable,
// so each flush writes tables spanning all their key ranges and Pebble's
// compactions rewrite the others' data again and again: at 10M aggregates
// on 4 partitions, read 4 at a time, compactions took 47% of the CPU (31%
// one at a time) and the restore was ready in 215 s against 163 s
// (docs/performance.md, "Restore (issue 26)"). Overlapping each task's
// Restored with the next task's read keeps what concurrency gains without
// that cost.
const restoreParallel = 1

// worseRestoreErr is the error a restore attempt returns, of the first one
// (old, nil if none yet) and another: the first, unless it is transient or
// a cancellation (caused by the first error's cancel) and the other is
// neither.
func worseRestoreErr(old, err error) error {
	if old == nil {
		return err
	}
	var te *transientError
	stops := func(e error) bool { return !errors.As(e, &te) && !errors.Is(e, context.Canceled) }
	if !stops(old) && stops(err) {
		return err
	}
	return old
}
