// Package topicread reads a topic from its start to the end offsets it has
// when the read begins, read_committed: how tools, tests and checkers look at
// outputs, ledgers and changelogs without joining a group.
//
// Control records are kept while reading (and not passed on), so that a
// partition whose last record is a transaction marker is known to be read to
// its end; aborted records are still filtered by the client.
package topicread

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrNoTopic reports a topic that does not exist.
var ErrNoTopic = errors.New("topic does not exist")

// Committed calls fn for every committed data record of topic, in offset
// order per partition, up to the last stable offsets at the time of the call.
// opts must include the seed brokers (and TLS/SASL).
func Committed(ctx context.Context, opts []kgo.Opt, topic string, fn func(*kgo.Record)) error {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return err
	}
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
	cl.Close()
	if err != nil {
		return fmt.Errorf("end offsets of %s: %w", topic, err)
	}
	if _, ok := ends[topic]; !ok {
		return fmt.Errorf("%w: %s", ErrNoTopic, topic)
	}
	want := map[int32]int64{}
	var errs []error
	ends.Each(func(o kadm.ListedOffset) {
		switch {
		case errors.Is(o.Err, kerr.UnknownTopicOrPartition):
			errs = append(errs, fmt.Errorf("%w: %s", ErrNoTopic, topic))
		case o.Err != nil:
			errs = append(errs, fmt.Errorf("end offset of %s/%d: %w", topic, o.Partition, o.Err))
		case o.Offset > 0:
			want[o.Partition] = o.Offset
		}
	})
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if len(want) == 0 {
		return nil
	}
	rc, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return err
	}
	defer rc.Close()
	for len(want) > 0 {
		fs := rc.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %s: %w", topic, err)
		}
		for _, fe := range fs.Errors() {
			if fe.Err != nil && !errors.Is(fe.Err, context.Canceled) {
				return fmt.Errorf("read %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
			}
		}
		fs.EachRecord(func(r *kgo.Record) {
			if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
				delete(want, r.Partition)
			}
			if !r.Attrs.IsControl() {
				fn(r)
			}
		})
	}
	return nil
}
