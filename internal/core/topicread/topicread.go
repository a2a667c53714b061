// Package topicread reads committed records, read_committed, from topics up
// to the end offsets they have when the read begins: how tools, tests and
// checkers look at outputs, ledgers and changelogs without joining a group.
// It is the one committed-record reader: ops reads the changelogs with
// Partitions, everything else reads whole topics with Committed. It is also
// the one place that knows where such a read ends: StableEnds lists the last
// stable offsets when the read begins, and Ends follows a read until every
// partition reached its end (Partitions, and the ingress's receipts view,
// which keeps tailing after it caught up).
//
// Control records are kept while reading (and passed on only when asked), so that a
// partition whose last record is a transaction marker is known to be read to
// its end; aborted records are still filtered by the client.
package topicread

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrNoTopic reports a topic that does not exist.
var ErrNoTopic = errors.New("topic does not exist")

// FromStart as a Range's Start reads from the partition's log start offset,
// whatever it is when the read reaches it.
const FromStart int64 = -1

// Range is the offsets [Start, End) of one partition to read.
type Range struct{ Start, End int64 }

// Options tune a Partitions read; the zero value reads committed data
// records and waits for them as long as the context allows.
type Options struct {
	// Stall > 0 fails a read that sees no record for that long with a
	// *StallError.
	Stall time.Duration
	// Uncommitted reads read_uncommitted: what a checker compares with
	// what a read_committed reader may see.
	Uncommitted bool
	// Control passes the transaction markers to fn too.
	Control bool
}

// StallError reports a read that saw no record for After while Left
// partitions were still to be read to their end.
type StallError struct {
	After time.Duration
	Left  int
}

func (e *StallError) Error() string {
	return fmt.Sprintf("no record for %s with %d partitions still to read", e.After, e.Left)
}

// Committed calls fn for every committed data record of topic, in offset
// order per partition, up to the last stable offsets at the time of the call.
// opts must include the seed brokers (and TLS/SASL).
func Committed(ctx context.Context, opts []kgo.Opt, topic string, fn func(*kgo.Record)) error {
	ranges, missing, err := StableEnds(ctx, opts, topic)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s", ErrNoTopic, topic)
	}
	err = Partitions(ctx, opts, ranges, Options{}, func(r *kgo.Record) error { fn(r); return nil })
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("read %s: %w", topic, err)
	}
	return err
}

// Partitions reads each partition in ranges from its Start to its End,
// committed records only (unless o.Uncommitted), and calls fn for each data
// record (and marker, with o.Control) in offset order per partition; an
// error from fn ends the read. A cancelled ctx returns ctx.Err(). opts must
// include the seed brokers (and TLS/SASL).
func Partitions(ctx context.Context, opts []kgo.Opt, ranges map[string]map[int32]Range, o Options, fn func(*kgo.Record) error) error {
	offsets := map[string]map[int32]kgo.Offset{}
	left := 0
	for tp, ps := range ranges {
		for p, r := range ps {
			if offsets[tp] == nil {
				offsets[tp] = map[int32]kgo.Offset{}
			}
			offsets[tp][p] = kgo.NewOffset().At(r.Start)
			if r.Start == FromStart {
				offsets[tp][p] = kgo.NewOffset().AtStart()
			}
			left++
		}
	}
	if left == 0 {
		return nil
	}
	copts := append(append([]kgo.Opt(nil), opts...), ClientOpts(o)...)
	cl, err := kgo.NewClient(append(copts, kgo.ConsumePartitions(offsets))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	rd := &reader{ends: NewEnds(ranges), control: o.Control, fn: fn}
	last := time.Now()
	for rd.ends.Left() > 0 {
		got, err := rd.poll(ctx, cl)
		if err != nil {
			return err
		}
		if got {
			last = time.Now()
		} else if o.Stall > 0 && time.Since(last) > o.Stall {
			return &StallError{After: o.Stall, Left: rd.ends.Left()}
		}
	}
	return nil
}

// reader passes on the records of a Partitions read up to their ends.
type reader struct {
	ends    *Ends
	control bool // pass the markers on too
	fn      func(*kgo.Record) error
}

// poll fetches once (for at most a second, so that a stall is noticed) and
// passes on the records inside the ranges; it reports whether any was.
func (rd *reader) poll(ctx context.Context, cl *kgo.Client) (bool, error) {
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	fs := cl.PollFetches(pctx)
	cancel()
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	var ferr error
	fs.EachError(func(tp string, p int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && ferr == nil {
			ferr = fmt.Errorf("read %s/%d: %w", tp, p, denied(err, tp))
		}
	})
	if ferr != nil {
		return false, ferr
	}
	got := false
	var rerr error
	fs.EachRecord(func(r *kgo.Record) {
		if rerr != nil || !rd.ends.See(r) {
			return
		}
		got = true
		if rd.control || !r.Attrs.IsControl() {
			rerr = rd.fn(r)
		}
	})
	return got, rerr
}
