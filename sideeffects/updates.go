package sideeffects

import (
	"time"

	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/staging"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// request is one Runner Update waiting for the loop.
type request struct {
	wt    *workerTask // the task whose runner asked
	fn    func(*effect.Ledger) error
	reply chan error
	// blocked: it writes to a partition the client holds no offset for
	// yet; Due ignores it until a transaction owns the partition.
	blocked bool
}

// Due reports queued updates that Begin can act on: those of verified tasks,
// except the ones already found to need a partition the group holds no
// offset for (they wait for the task's first records).
func (h *workerHandler) Due(time.Time) bool {
	w := (*Worker)(h)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.requests {
		if r.wt.task.Verified() && !r.blocked {
			return true
		}
	}
	return false
}

// Begin applies the Runners' queued ledger updates, each in its own overlay
// so that a failing one leaves nothing behind; their callers are answered
// once the transaction commits. Only updates of tasks the transaction owns
// (owned and verified at its start) are applied: an update of a revoked or
// lost partition is refused, one of a partition being restored again waits.
func (h *workerHandler) Begin(b *eos.Batch) error {
	w := (*Worker)(h)
	w.mu.Lock()
	reqs := w.requests
	w.requests = nil
	w.mu.Unlock()
	var ok, wait []*request
	for _, r := range reqs {
		switch {
		case r.wt.revoked.Load():
			r.reply <- ErrRevoked
			continue
		case !b.Owns(r.wt.task) && !r.wt.task.Verified():
			wait = append(wait, r) // being restored again
			continue
		case !b.Owns(r.wt.task):
			// Verified, but the client holds no offset for the
			// partition: never committed (a new partition), or lost
			// and about to be revoked (Loop.dropLost). A write here
			// could not be fenced. An update that writes nothing
			// (Recover of a ledger with no call in flight) is done;
			// one that writes waits for an owned transaction.
			ov := staging.New(staging.ReadOnly{Store: w.store})
			if err := r.fn(effect.NewLedger(ov, r.wt.task.Prefix)); err != nil {
				r.reply <- err
			} else if len(ov.Writes()) == 0 {
				r.reply <- nil
			} else {
				r.blocked = true
				wait = append(wait, r)
			}
			continue
		}
		r.blocked = false
		ov := staging.New(b.For(r.wt.task).Txn)
		if err := r.fn(effect.NewLedger(ov, r.wt.task.Prefix)); err != nil {
			r.reply <- err
			continue
		}
		ov.Flush()
		ok = append(ok, r)
	}
	if len(wait) > 0 {
		w.mu.Lock()
		w.requests = append(wait, w.requests...)
		w.mu.Unlock()
	}
	if len(ok) > 0 {
		b.OnCommit(func() {
			for _, r := range ok {
				r.reply <- nil
			}
		})
		b.OnAbort(func() {
			// The transaction did not commit (a rebalance, an abortable
			// error): run the updates again in the next one, against the
			// state as committed. Each update re-reads the ledger, so a
			// second run decides afresh. Updates of a partition we no
			// longer own are answered by Revoked.
			w.mu.Lock()
			w.requests = append(ok, w.requests...)
			w.mu.Unlock()
			w.loop.Wake()
		})
	}
	return nil
}

// taskStore is the Store of a task's Runner: updates go through the
// worker's loop.
type taskStore workerTask

// Update queues fn for the loop's next transaction and waits for its
// answer. Whether the request may still be queued is decided under w.mu,
// where Revoked and failRequests take the queue: a request queued there is
// answered by them or by Begin, and once either has run for this task, none
// is queued (a request queued after failRequests would wait for ever, and
// Worker.Run with it, for its Runner).
func (s *taskStore) Update(fn func(*effect.Ledger) error) error {
	w := s.w
	r := &request{wt: (*workerTask)(s), fn: fn, reply: make(chan error, 1)}
	w.hook(hookEnqueue)
	w.mu.Lock()
	switch {
	case w.stopped:
		w.mu.Unlock()
		return errLoopStopped
	case s.revoked.Load():
		w.mu.Unlock()
		return ErrRevoked
	}
	w.requests = append(w.requests, r)
	w.mu.Unlock()
	w.loop.Wake()
	return <-r.reply
}

func (s *taskStore) View(fn func(*effect.Ledger) error) error {
	return fn(effect.NewLedger(staging.ReadOnly{Store: s.w.store}, s.task.Prefix))
}
