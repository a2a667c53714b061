package metrics

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string
	Partition int32
}

// LagSource reports consumer lag per partition. The Collector reports the
// partitions the processor has assigned; a source may return more.
type LagSource interface {
	Lag(ctx context.Context) (map[TopicPartition]int64, error)
}

// KafkaLag computes a consumer group's lag with kadm: for every partition of
// the topics, the end offset (high watermark) minus the group's committed
// offset, or minus the log start offset when the group has not committed.
//
// With transactional producers the end offset is past the last transaction's
// commit marker, so an idle partition can show a lag of 1 per trailing marker
// that the committed offset does not cover.
type KafkaLag struct {
	adm    *kadm.Client
	group  string
	topics []string
}

// NewKafkaLag returns the lag of group on topics. The caller owns adm's
// client and closes it after Run returned.
func NewKafkaLag(adm *kadm.Client, group string, topics ...string) *KafkaLag {
	return &KafkaLag{adm: adm, group: group, topics: append([]string(nil), topics...)}
}

// Lag implements LagSource. Partitions whose offsets could not be loaded are
// left out; the error reports them.
func (k *KafkaLag) Lag(ctx context.Context) (map[TopicPartition]int64, error) {
	ends, err := k.adm.ListEndOffsets(ctx, k.topics...)
	if err != nil {
		return nil, fmt.Errorf("metrics: lag: end offsets: %w", err)
	}
	committed, err := k.adm.FetchOffsetsForTopics(ctx, k.group, k.topics...)
	if errors.Is(err, kerr.GroupIDNotFound) {
		// The group has not committed yet (first start): everything from
		// the start offsets is lag.
		committed, err = kadm.OffsetResponses{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("metrics: lag: committed offsets of group %s: %w", k.group, err)
	}
	var starts kadm.ListedOffsets // loaded only if some partition has no commit
	var errs []error
	out := make(map[TopicPartition]int64)
	ends.Each(func(end kadm.ListedOffset) {
		if end.Err != nil {
			errs = append(errs, fmt.Errorf("%s/%d: end offset: %w", end.Topic, end.Partition, end.Err))
			return
		}
		from := int64(-1)
		if c, ok := committed.Lookup(end.Topic, end.Partition); ok && c.Err == nil {
			from = c.At
		}
		if from < 0 {
			if starts == nil {
				if starts, err = k.adm.ListStartOffsets(ctx, k.topics...); err != nil {
					errs = append(errs, fmt.Errorf("start offsets: %w", err))
					starts = kadm.ListedOffsets{}
				}
			}
			s, ok := starts.Lookup(end.Topic, end.Partition)
			if !ok || s.Err != nil {
				return
			}
			from = s.Offset
		}
		out[TopicPartition{end.Topic, end.Partition}] = max(end.Offset-from, 0)
	})
	if len(errs) > 0 {
		return out, fmt.Errorf("metrics: lag: %w", errors.Join(errs...))
	}
	return out, nil
}

// LagSources merges several sources (the processor's group and the
// executor's). A failing source does not hide the others' values.
type LagSources []LagSource

// Lag implements LagSource.
func (ls LagSources) Lag(ctx context.Context) (map[TopicPartition]int64, error) {
	out := make(map[TopicPartition]int64)
	var errs []error
	for _, l := range ls {
		m, err := l.Lag(ctx)
		for k, v := range m {
			out[k] = v
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}
