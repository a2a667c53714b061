package sideeffects

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/runtime/command"
	"github.com/projector-dev/projector/internal/runtime/eos"
	"github.com/projector-dev/projector/internal/runtime/jsonenc"
	"github.com/projector-dev/projector/internal/runtime/staging"
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
// instead of calling the key again once the attempt's deadline passed.
type Command struct {
	Op      string          `json:"op"` // "resolve" | "outcome"
	As      string          `json:"as"` // succeeded | failed (| pending | unknown for an outcome)
	Note    string          `json:"note,omitempty"`
	Attempt int             `json:"attempt,omitempty"`
	Result  *effect.Attempt `json:"result,omitempty"`
	Next    time.Time       `json:"next,omitzero"`
}

// Command ops.
const (
	OpResolve = "resolve"
	OpOutcome = "outcome"
)

// Valid reports whether c names a known op (command.Decode).
func (c *Command) Valid() bool { return c.Op == OpResolve || c.Op == OpOutcome }

// applyCommand applies a command record inside the transaction: an
// operator's resolve, or another Runner's outcome report (settleReport). A
// command that cannot apply is dead-lettered with the reason, so the
// operator sees why.
func (w *Worker) applyCommand(b *eos.Batch, wt *workerTask, r *kgo.Record) error {
	t := wt.task
	var c Command
	if err := command.Decode(r.Value, &c); err != nil {
		b.DeadLetter(t.ID, r.Offset, r.Key, r.Value, command.ReasonInvalidValue, err.Error())
		return nil
	}
	as, err := effect.ParseStatus(c.As)
	if err != nil {
		b.DeadLetter(t.ID, r.Offset, r.Key, r.Value, command.ReasonInvalidValue, err.Error())
		return nil
	}
	if c.Op == OpOutcome {
		return w.settleReport(b, wt, r, c, as)
	}
	ov := staging.New(b.Txn)
	e, err := effect.NewLedger(ov, t.Prefix).Resolve(string(r.Key), as, c.Note, b.Now)
	if err != nil {
		// Not unknown (or no such key): the command is refused, recorded.
		b.DeadLetter(t.ID, r.Offset, r.Key, r.Value, command.ReasonInvalidValue, "resolve refused: "+err.Error())
		return nil
	}
	ov.Flush()
	b.OnCommit(func() {
		w.stats.add(e.Effect, "resolved")
		w.cfg.Logger.Info("side effect resolved by operator", "key", e.Key, "as", c.As, "note", c.Note)
	})
	return nil
}

// settleReport records the outcome another Runner reported for attempt
// c.Attempt of a key (see Command). A report the ledger has moved past – the
// outcome was recorded already, or the key was tried again – changes
// nothing: the attempt it describes is no longer the open one.
func (w *Worker) settleReport(b *eos.Batch, wt *workerTask, r *kgo.Record, c Command, as effect.Status) error {
	t := wt.task
	if c.Result == nil || c.Attempt < 1 {
		b.DeadLetter(t.ID, r.Offset, r.Key, r.Value, command.ReasonInvalidValue, "outcome report without attempt or result")
		return nil
	}
	ov := staging.New(b.Txn)
	e, err := effect.NewLedger(ov, t.Prefix).Settle(string(r.Key), c.Attempt, *c.Result, as, c.Next)
	switch {
	case errors.Is(err, effect.ErrIllegalTransition) || errors.Is(err, effect.ErrNotFound):
		w.cfg.Logger.Debug("outcome report no longer applies", "key", string(r.Key), "attempt", c.Attempt, "err", err)
		return nil
	case err != nil:
		return err
	}
	ov.Flush()
	runner := wt.runner
	b.OnCommit(func() {
		w.changed(e)
		w.cfg.Logger.Info("side effect outcome recorded from the previous owner's report", "key", e.Key, "status", e.Status, "attempt", c.Attempt)
		if runner != nil {
			runner.Enqueue(e.Key) // a retry it scheduled re-reads the entry
		}
	})
	return nil
}

// report sends the outcome of attempt n of key, which a revoked Runner
// could not record, to the key's partition (see Command). Best effort: if it
// is lost, the new owner retries the key after the attempt's deadline, with
// the same idempotency key.
func (w *Worker) report(key string, n int, a effect.Attempt, to effect.Status, next time.Time) {
	w.reportMu.Lock()
	cl := w.reporter
	w.reportMu.Unlock()
	if cl == nil {
		return
	}
	v, err := reportValue(n, a, to, next)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	cl.Produce(ctx, &kgo.Record{Topic: w.cfg.EffectsTopic, Key: []byte(key), Value: v,
		Headers: []kgo.RecordHeader{{Key: HeaderCommand, Value: []byte(OpOutcome)}}},
		func(_ *kgo.Record, err error) {
			cancel()
			if err != nil {
				w.cfg.Logger.Warn("could not report a side effect's outcome to the partition's new owner; it retries the key after the attempt's deadline",
					"key", key, "attempt", n, "err", err)
			}
		})
}

// reportValue is the value of an outcome report: the attempt with its
// texts cut as the ledger would cut them, so that a receiver's long answer
// cannot make the report too large to send, encoded without HTML escaping
// (jsonenc).
func reportValue(n int, a effect.Attempt, to effect.Status, next time.Time) ([]byte, error) {
	b := a.Bounded()
	return jsonenc.Marshal(Command{Op: OpOutcome, As: to.String(), Attempt: n, Result: &b, Next: next})
}
