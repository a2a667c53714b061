// Package topicread reads committed records, read_committed, from topics up
// to the end offsets they have when the read begins: how tools, tests and
// checkers look at outputs, ledgers and changelogs without joining a group.
// It is the one committed-record reader: ops reads the changelogs with
// Partitions, everything else reads whole topics with Committed.
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

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
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
	ranges, err := toLastStable(ctx, opts, topic)
	if err != nil {
		return err
	}
	err = Partitions(ctx, opts, ranges, Options{}, func(r *kgo.Record) error { fn(r); return nil })
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return fmt.Errorf("read %s: %w", topic, err)
	}
	return err
}

// toLastStable returns, per partition of topic with committed records, the
// range from the log start to the last stable offset.
func toLastStable(ctx context.Context, opts []kgo.Opt, topic string) (map[string]map[int32]Range, error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	cl.Close()
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	if _, ok := ends[topic]; !ok {
		return nil, fmt.Errorf("%w: %s", ErrNoTopic, topic)
	}
	want := map[int32]Range{}
	var errs []error
	ends.Each(func(o kadm.ListedOffset) {
		switch {
		case errors.Is(o.Err, kerr.UnknownTopicOrPartition):
			errs = append(errs, fmt.Errorf("%w: %s", ErrNoTopic, topic))
		case o.Err != nil:
			errs = append(errs, fmt.Errorf("end offset of %s/%d: %w", topic, o.Partition, o.Err))
		case o.Offset > 0:
			want[o.Partition] = Range{Start: FromStart, End: o.Offset}
		}
	})
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return map[string]map[int32]Range{topic: want}, nil
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
	iso := kgo.ReadCommitted()
	if o.Uncommitted {
		iso = kgo.ReadUncommitted()
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...),
		kgo.ConsumePartitions(offsets),
		kgo.FetchIsolationLevel(iso),
		// A committed range ends with a transaction marker: keeping the
		// markers is what lets the read see that it reached the end.
		kgo.KeepControlRecords())...)
	if err != nil {
		return err
	}
	defer cl.Close()
	rd := &reader{ranges: ranges, done: map[string]map[int32]bool{}, left: left, control: o.Control, fn: fn}
	last := time.Now()
	for rd.left > 0 {
		got, err := rd.poll(ctx, cl)
		if err != nil {
			return err
		}
		if got {
			last = time.Now()
		} else if o.Stall > 0 && time.Since(last) > o.Stall {
			return &StallError{After: o.Stall, Left: rd.left}
		}
	}
	return nil
}

// reader tracks which partitions of a Partitions read reached their end.
type reader struct {
	ranges  map[string]map[int32]Range
	done    map[string]map[int32]bool
	left    int
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
			ferr = fmt.Errorf("read %s/%d: %w", tp, p, err)
		}
	})
	if ferr != nil {
		return false, ferr
	}
	got := false
	var rerr error
	fs.EachRecord(func(r *kgo.Record) {
		rng, ok := rd.ranges[r.Topic][r.Partition]
		if rerr != nil || !ok || rd.done[r.Topic][r.Partition] || r.Offset >= rng.End {
			return
		}
		got = true
		if rd.control || !r.Attrs.IsControl() {
			rerr = rd.fn(r)
		}
		if r.Offset+1 >= rng.End {
			if rd.done[r.Topic] == nil {
				rd.done[r.Topic] = map[int32]bool{}
			}
			rd.done[r.Topic][r.Partition] = true
			rd.left--
		}
	})
	return got, rerr
}
