package sideeffects

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/command"
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/jsonenc"
	"github.com/projector-dev/projector/internal/core/staging"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// HeaderCommand marks a record on the effects topic that is an operator
// command rather than an intent; its value is a Command. It is
// command.Header, shared with the processor's input topic.
const HeaderCommand = command.Header

// Command is an instruction for one key, sent through the effects topic so
// that it is applied by the partition's owner inside its own transaction,
// whether or not the executor is running when it is sent. Op "resolve" is
// an operator's (As, Note); op "outcome" is an executor's report of a call
// it made but could no longer record because its partition was revoked
// (Attempt, Result, As, Next): the new owner records it (Ledger.Settle)
// instead of calling the key again once the attempt's deadline passed; op
// "withdraw" is an executor's report of an attempt it started but did not
// call, and could no longer record withdrawn (Attempt, Start, Next): the new
// owner withdraws it (Ledger.Withdraw) instead of taking it for an unknown
// outcome.
type Command struct {
	Op      string          `json:"op"`           // "resolve" | "outcome" | "withdraw"
	As      string          `json:"as,omitempty"` // succeeded | failed (| pending | unknown for an outcome)
	Note    string          `json:"note,omitempty"`
	Attempt int             `json:"attempt,omitempty"`
	Result  *effect.Attempt `json:"result,omitempty"`
	Start   time.Time       `json:"start,omitzero"` // of the withdrawn attempt
	Next    time.Time       `json:"next,omitzero"`
}

// Command ops.
const (
	OpResolve  = "resolve"
	OpOutcome  = "outcome"
	OpWithdraw = "withdraw"
)

// Valid reports whether c names a known op (command.Decode); check tells
// what else is wrong with it.
func (c *Command) Valid() bool { return c.Op == OpResolve || c.Op == OpOutcome || c.Op == OpWithdraw }

// check validates c in full for its op before anything of it is applied,
// and returns the status it names; the error says what is wrong. now bounds
// an outcome report's next attempt.
func (c *Command) check(now time.Time) (effect.Status, error) {
	what := map[string]string{OpResolve: "resolve command", OpOutcome: "outcome report", OpWithdraw: "withdrawal report"}[c.Op]
	if c.Op == OpWithdraw {
		if err := c.checkWithdraw(now); err != nil {
			return 0, fmt.Errorf("sideeffects: %s: %w", what, err)
		}
		return effect.Pending, nil
	}
	as, err := effect.ParseStatus(c.As)
	if err != nil {
		return 0, fmt.Errorf("sideeffects: %s: as %q is not a status (pending, in-flight, succeeded, failed, unknown)", what, c.As)
	}
	switch c.Op {
	case OpResolve:
		switch {
		case as != effect.Succeeded && as != effect.Failed:
			err = fmt.Errorf("as must be succeeded or failed, got %s", as)
		case c.Attempt != 0 || c.Result != nil || !c.Next.IsZero() || !c.Start.IsZero():
			err = errors.New("attempt, result, start and next belong to an executor's report")
		}
	case OpOutcome:
		err = c.checkOutcome(as, now)
	}
	if err != nil {
		return 0, fmt.Errorf("sideeffects: %s: %w", what, err)
	}
	return as, nil
}

// checkOutcome validates an outcome report as the Runner makes it
// (Runner.outcome): attempt n ≥ 1, its result, a status that an outcome
// leads to, and a next attempt only for a retry, no further away than the
// longest backoff.
func (c *Command) checkOutcome(as effect.Status, now time.Time) error {
	res := c.Result
	switch {
	case as == effect.InFlight:
		return fmt.Errorf("as %s is not an outcome (succeeded, failed, pending or unknown)", as)
	case c.Attempt < 1:
		return fmt.Errorf("attempt must be 1 or more, got %d", c.Attempt)
	case res == nil:
		return errors.New("result is missing")
	case c.Note != "":
		return errors.New("note belongs to a resolve command")
	case res.N != 0 && res.N != c.Attempt:
		return fmt.Errorf("result.n %d is not attempt %d", res.N, c.Attempt)
	case res.Duration < 0:
		return fmt.Errorf("result.duration %s is negative", res.Duration)
	case res.StatusCode != 0 && (res.StatusCode < 100 || res.StatusCode > 599):
		return fmt.Errorf("result.statusCode %d is not an HTTP status", res.StatusCode)
	case res.Outcome != 0 && !leadsTo(res.Outcome, as):
		return fmt.Errorf("result.outcome %s does not lead to %s", res.Outcome, as)
	case as.Terminal() && !c.Next.IsZero():
		return fmt.Errorf("next is set for the final status %s", as)
	case c.Next.After(now.Add(BackoffCap + DeadlineMargin)):
		return fmt.Errorf("next %s is further away than the longest backoff (%s)", c.Next.Format(time.RFC3339), BackoffCap)
	case !c.Start.IsZero():
		return errors.New("start belongs to a withdrawal report")
	}
	return nil
}

// checkWithdraw validates a withdrawal report as the Runner makes it
// (Runner.withdraw): attempt n ≥ 1 and its start, a next attempt no further
// away than the longest backoff, nothing else.
func (c *Command) checkWithdraw(now time.Time) error {
	switch {
	case c.As != "" && c.As != effect.Pending.String():
		return fmt.Errorf("as %q: a withdrawn attempt leaves its key pending", c.As)
	case c.Attempt < 1:
		return fmt.Errorf("attempt must be 1 or more, got %d", c.Attempt)
	case c.Start.IsZero():
		return errors.New("start is missing")
	case c.Result != nil || c.Note != "":
		return errors.New("result and note belong to other commands")
	case c.Next.After(now.Add(BackoffCap + DeadlineMargin)):
		return fmt.Errorf("next %s is further away than the longest backoff (%s)", c.Next.Format(time.RFC3339), BackoffCap)
	}
	return nil
}

// leadsTo reports whether a call's outcome o may move an entry to status as
// (Runner.outcome): a retryable outcome also fails a key out of attempts.
func leadsTo(o effect.Outcome, as effect.Status) bool {
	switch o {
	case effect.OutcomeSucceeded:
		return as == effect.Succeeded
	case effect.OutcomeFailed:
		return as == effect.Failed
	case effect.OutcomeRetryable:
		return as == effect.Pending || as == effect.Failed
	case effect.OutcomeUnknown:
		return as == effect.Unknown
	}
	return false
}

// applyCommand applies a command record inside the transaction: an
// operator's resolve, or another Runner's outcome report (settleReport). A
// command that is not valid, or that the ledger refuses, is dead-lettered
// with the reason, so the operator sees why (refuse).
func (w *Worker) applyCommand(b *eos.Batch, wt *workerTask, r *kgo.Record) error {
	t := wt.task
	var c Command
	if err := command.Decode(r.Value, &c); err != nil {
		return wt.refuse(b, r, "", err)
	}
	as, err := c.check(b.Now)
	if err != nil {
		return wt.refuse(b, r, "", err)
	}
	switch c.Op {
	case OpOutcome:
		return w.applyReport(b, wt, r, c, func(l *effect.Ledger) (effect.Entry, error) {
			return l.Settle(string(r.Key), c.Attempt, *c.Result, as, c.Next)
		})
	case OpWithdraw:
		return w.applyReport(b, wt, r, c, func(l *effect.Ledger) (effect.Entry, error) {
			return l.Withdraw(string(r.Key), c.Attempt, c.Start, c.Next, b.Now)
		})
	}
	ov := staging.New(b.Txn)
	e, err := effect.NewLedger(ov, t.Prefix).Resolve(string(r.Key), as, c.Note, b.Now)
	if err != nil {
		// Not unknown (or no such key): the command is refused, recorded.
		return wt.refuse(b, r, "resolve refused: ", err)
	}
	ov.Flush()
	b.OnCommit(func() {
		w.stats.add(e.Effect, labelResolved)
		w.cfg.Logger.Info("side effect resolved by operator", "key", e.Key, "as", c.As, "note", c.Note)
	})
	return nil
}

// applyReport applies another Runner's report of attempt c.Attempt of a key
// (see Command): records its outcome (Ledger.Settle) or withdraws it
// (Ledger.Withdraw). A report the ledger has moved past – the outcome was
// recorded already, the attempt withdrawn, or the key tried again – changes
// nothing: the attempt it describes is no longer the open one; it is
// counted ("stale-report") and logged. A report of a key the ledger does not
// hold, or of an attempt it never started, cannot have come from a Runner:
// it is dead-lettered. (A withdrawn attempt's number is the next attempt's
// too, so a withdrawal report may name the attempt after the last.)
func (w *Worker) applyReport(b *eos.Batch, wt *workerTask, r *kgo.Record, c Command, apply func(*effect.Ledger) (effect.Entry, error)) error {
	ov := staging.New(b.Txn)
	e, err := apply(effect.NewLedger(ov, wt.task.Prefix))
	last := e.Attempts
	if c.Op == OpWithdraw {
		last++
	}
	switch {
	case errors.Is(err, effect.ErrIllegalTransition) && c.Attempt <= last:
		b.OnCommit(func() {
			w.stats.add(e.Effect, labelStaleReport)
			w.cfg.Logger.Info("executor report no longer applies: the ledger has moved on", "key", e.Key, "op", c.Op, "attempt", c.Attempt, "err", err)
		})
		return nil
	case err != nil:
		return wt.refuse(b, r, c.Op+" report refused: ", err)
	}
	ov.Flush()
	runner := wt.runner
	b.OnCommit(func() {
		w.changed(e)
		w.cfg.Logger.Info("side effect attempt settled from the previous owner's report", "key", e.Key, "op", c.Op, "status", e.Status, "attempt", c.Attempt)
		if runner != nil {
			runner.Enqueue(e.Key) // a retry it scheduled re-reads the entry
		}
	})
	return nil
}

// refuse dead-letters record r (invalid:value) with why and err, unless err
// says that the ledger could not read or write its own state
// (effect.StoreFailed): that error it returns, and it stops the loop. So a
// record – intent, command or report – can stop the executor only through a
// failure of its store, never through its content
// (docs/design.md#nothing-dropped-silently).
func (wt *workerTask) refuse(b *eos.Batch, r *kgo.Record, why string, err error) error {
	if effect.StoreFailed(err) {
		return err
	}
	b.DeadLetterWithHeaders(wt.task.ID, r.Offset, r.Key, r.Value, r.Headers, command.ReasonInvalidValue, why+err.Error())
	return nil
}

// report sends the outcome of attempt n of key, which a revoked Runner
// could not record, to the key's partition (see Command). Best effort: if it
// is lost, the new owner retries the key after the attempt's deadline, with
// the same idempotency key.
func (w *Worker) report(key string, n int, a effect.Attempt, to effect.Status, next time.Time) {
	w.sendReport(key, Command{Op: OpOutcome, As: to.String(), Attempt: n, Result: &a, Next: next})
}

// reportWithdrawal sends attempt n of key, which a revoked Runner withdrew
// without calling and could not record withdrawn, to the key's partition.
// Best effort, as report: if it is lost, the new owner takes the attempt
// for an unknown outcome.
func (w *Worker) reportWithdrawal(key string, n int, start, next time.Time) {
	w.sendReport(key, Command{Op: OpWithdraw, Attempt: n, Start: start, Next: next})
}

// sendReport produces c, keyed like the intent, with the command header.
func (w *Worker) sendReport(key string, c Command) {
	w.reportMu.Lock()
	cl := w.reporter
	w.reportMu.Unlock()
	if cl == nil {
		return
	}
	v, err := reportValue(c)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	cl.Produce(ctx, &kgo.Record{Topic: w.cfg.EffectsTopic, Key: []byte(key), Value: v,
		Headers: []kgo.RecordHeader{{Key: HeaderCommand, Value: []byte(c.Op)}}},
		func(_ *kgo.Record, err error) {
			cancel()
			if err != nil {
				w.cfg.Logger.Warn("could not report a side effect's attempt to the partition's new owner; it retries the key after the attempt's deadline",
					"key", key, "op", c.Op, "attempt", c.Attempt, "err", err)
			}
		})
}

// reportValue is the value of a report: for an outcome, the attempt with
// its texts cut as the ledger would cut them, so that a receiver's long
// answer cannot make the report too large to send; encoded without HTML
// escaping (jsonenc).
func reportValue(c Command) ([]byte, error) {
	if c.Result != nil {
		b := c.Result.Bounded()
		c.Result = &b
	}
	return jsonenc.Marshal(c)
}
