package ops

import (
	"context"
	"errors"
	"time"

	"github.com/projector-dev/projector/internal/core/acl"
	"github.com/projector-dev/projector/processor"
)

// ErrNothingHeld reports a skip-gap for an aggregate that holds no events in
// the committed state (and was not forced).
var ErrNothingHeld = errors.New("ops: the aggregate holds no events")

// Skip asks for a skip-gap and says how to follow it.
type Skip struct {
	Projection string // "" every projection holding events of the aggregate
	Aggregate  string
	Note       string
	// Force sends the command even if the committed state shows no held
	// events, keyed by the aggregate to each input topic.
	Force bool
	// NoWait returns once the command is sent.
	NoWait bool
	// Timeout bounds the wait for the worker to apply the command.
	Timeout time.Duration
	// Read reads the committed state (the caller bounds and explains it).
	Read func(context.Context, Query) (*State, error)
	// Holding is called for each aggregate with held events before the
	// command is sent; Sent for each command record once produced. Either
	// may be nil.
	Holding func(*Aggregate)
	Sent    func(Sent)
}

// Skipped is how a skip-gap ended.
type Skipped struct {
	// Before is the committed state read before the command was sent.
	Before *State
	// Queued is set when no worker runs in the group: the command is
	// applied when the processor runs.
	Queued *GroupState
	// NothingToWait: forced with nothing held, there is nothing to see.
	NothingToWait bool
	// After is the committed state of the partitions the command went to,
	// once the worker applied it.
	After *State
}

// SkipGapAndWait is the skip-gap protocol: read what the aggregate holds,
// send a command to each partition holding it (SkipGap), and, unless told
// not to, wait until the committed state shows fewer held events. The
// errors are the Read's, SkipGap's, ErrNothingHeld, ErrNotApplied and
// ctx.Err().
func SkipGapAndWait(ctx context.Context, t Target, k Skip) (*Skipped, error) {
	q := Query{Projection: k.Projection, Aggregate: k.Aggregate}
	before, err := k.Read(ctx, q)
	if err != nil {
		return nil, err
	}
	out := &Skipped{Before: before}
	dests := skipDests(before, k.Holding)
	if len(dests) == 0 {
		if !k.Force {
			return out, ErrNothingHeld
		}
		for _, in := range t.Inputs {
			dests = append(dests, Sent{Topic: in, Partition: -1})
		}
	}
	// Whether a worker runs is asked before the command goes out, so that a
	// principal that may not describe the group is told before anything is
	// sent (a second skip after a failed first would skip another gap).
	var wk GroupState
	var werr error
	if !k.NoWait {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		wk, werr = DescribeGroup(wctx, t.Brokers, t.ClientOpts, t.Group)
		cancel()
		if acl.IsAuthorization(werr) {
			return out, werr
		}
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	sent, err := SkipGap(sctx, t.Brokers, t.ClientOpts,
		processor.Command{Projection: k.Projection, Aggregate: k.Aggregate, Note: k.Note}, dests)
	cancel()
	if err != nil {
		return out, err
	}
	for _, d := range sent {
		if k.Sent != nil {
			k.Sent(d)
		}
	}
	if k.NoWait {
		return out, nil
	}
	if werr == nil && !wk.Running() {
		out.Queued = &wk
		return out, nil
	}
	want := before.HeldCount(k.Projection, k.Aggregate)
	if want == 0 {
		out.NothingToWait = true
		return out, nil
	}
	q.Partitions = map[string][]int32{}
	for _, d := range sent {
		q.Partitions[d.Topic] = append(q.Partitions[d.Topic], d.Partition)
	}
	err = Await(ctx, k.Timeout, 250*time.Millisecond, func() (bool, error) {
		after, err := k.Read(ctx, q)
		if err != nil || after.HeldCount(k.Projection, k.Aggregate) >= want {
			return false, err
		}
		out.After = after
		return true, nil
	})
	return out, err
}

// skipDests lists the input partitions holding events of the aggregate, once
// each, and tells holding about every aggregate with held events.
func skipDests(before *State, holding func(*Aggregate)) []Sent {
	var dests []Sent
	seen := map[Sent]bool{}
	for _, a := range before.Gaps() {
		d := Sent{Topic: a.Input, Partition: a.Partition}
		if !seen[d] {
			seen[d] = true
			dests = append(dests, d)
		}
		if holding != nil {
			holding(a)
		}
	}
	return dests
}
