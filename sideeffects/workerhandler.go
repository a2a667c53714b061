package sideeffects

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/command"
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/inputformat"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// workerTask is what the worker keeps for an owned partition, its
// eos.TaskHandler: its Runner, once started, and how to stop it.
type workerTask struct {
	w      *Worker
	task   *eos.Task
	runner *Runner // nil until the partition is verified (Restored)
	cancel context.CancelFunc
	// revoked is set when the partition is revoked: from then on this
	// runner's updates are refused, even those it makes while winding down,
	// so that it can never race the partition's next runner (here or on
	// another instance) over the same ledger entries.
	revoked atomic.Bool
}

// workerHandler is the worker as an eos.Handler.
type workerHandler Worker

// NewTask returns the state of a newly assigned partition; Restored starts
// its Runner.
func (h *workerHandler) NewTask(t *eos.Task) *workerTask {
	return &workerTask{w: (*Worker)(h), task: t}
}

func (wt *workerTask) Restored() error {
	w, t := wt.w, wt.task
	if wt.runner != nil {
		return nil // restored again after an abort: the runner keeps going
	}
	if !t.Verified() {
		// The first restore on assignment: a previous owner's transaction
		// may still be open (it may have started a key and called its
		// receiver). The Runner starts at verification, when that has
		// resolved and the ledger shows it.
		return nil
	}
	ctx, cancel := context.WithCancel(w.runCtx)
	r, err := NewRunner(RunnerConfig{
		Store: (*taskStore)(wt), Effects: w.cfg.Effects, Workers: w.cfg.Workers,
		Now: w.cfg.seams.Now, Logger: w.cfg.Logger.With("partition", t.ID.Partition), TracerProvider: w.cfg.TracerProvider,
		calls: w.calls, Scope: string(t.Prefix), Report: w.report, ReportWithdrawal: w.reportWithdrawal, OnChange: w.changed,
	})
	if err != nil {
		cancel()
		return err
	}
	w.mu.Lock()
	if ctx.Err() != nil { // the worker is stopping: start no Runner
		w.mu.Unlock()
		cancel()
		return nil
	}
	w.runnersWG.Add(1)
	w.mu.Unlock()
	wt.runner, wt.cancel = r, cancel
	w.stats.track(r)
	go func() {
		defer w.runnersWG.Done()
		defer w.stats.untrack(r)
		if err := r.Run(ctx); err != nil && !errors.Is(err, ErrRevoked) && ctx.Err() == nil {
			// Its partition's keys wait until the partition is assigned
			// again (a restart or a rebalance): say so loudly.
			w.cfg.Logger.Error("side-effect runner stopped; its partition executes nothing until reassigned", "partition", t.ID.Partition, "err", err)
		}
	}()
	return nil
}

func (wt *workerTask) Revoked() {
	w := wt.w
	if wt.runner != nil {
		wt.revoked.Store(true)
		wt.cancel()
	}
	// Updates still queued for this task can no longer be committed by us.
	w.mu.Lock()
	keep := w.requests[:0]
	var drop []*request
	for _, r := range w.requests {
		if r.wt == wt {
			drop = append(drop, r)
		} else {
			keep = append(keep, r)
		}
	}
	w.requests = keep
	w.mu.Unlock()
	for _, r := range drop {
		r.reply <- ErrRevoked
	}
}

// Stage has nothing to stage: the ledger is written as records are
// processed.
func (wt *workerTask) Stage(*eos.Batch) {}

// Process offers one intent (or applies one operator command). An intent
// that is not valid, or that the ledger refuses, is dead-lettered; only a
// failure of the ledger's store is returned (refuse), which stops the loop.
func (wt *workerTask) Process(b *eos.Batch, r *kgo.Record) error {
	w, t := wt.w, wt.task
	l := effect.NewLedger(b.Txn, t.Prefix)
	runner := wt.runner
	for _, hd := range r.Headers {
		if hd.Key == HeaderCommand {
			return w.applyCommand(b, wt, r)
		}
	}
	in, err := effect.ParseIntent(r.Value)
	if err != nil {
		return wt.refuse(b, r, "", err)
	}
	// The event's trace context, from the intent record's headers
	// (validated; an invalid one is ignored): the ledger keeps it for the
	// webhook calls (docs/contract.md#trace-context).
	if tc := inputformat.TraceFromHeaders(r.Headers); !tc.IsZero() {
		in.TraceParent, in.TraceState = string(tc.Parent), string(tc.State)
	}
	if string(r.Key) != in.Key {
		// The key picks the partition, and so the one ledger (and Runner)
		// of the idempotency key: an intent filed under another key could
		// be executed by two partitions' Runners at once
		// (docs/contract.md#side-effect-intents-topic).
		b.DeadLetterWithHeaders(t.ID, r.Offset, r.Key, r.Value, r.Headers, command.ReasonInvalidValue,
			fmt.Sprintf("sideeffects: intent key %q is not the record's key %q", in.Key, r.Key))
		return nil
	}
	if why := w.tooLarge(in); why != "" {
		b.DeadLetterWithHeaders(t.ID, r.Offset, r.Key, r.Value, r.Headers, ReasonTooLarge, why)
		return nil
	}
	e, dup, err := l.Offer(in, b.Now)
	if err != nil {
		return wt.refuse(b, r, "", err)
	}
	if dup {
		b.OnCommit(func() { w.stats.add(in.Effect, labelDuplicate) })
		return nil
	}
	b.OnCommit(func() {
		w.stats.add(e.Effect, effect.Pending.String())
		if runner != nil {
			runner.Enqueue(e.Key)
		}
	})
	return nil
}
