package ops

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/operator/topicread"
)

// stableEnds returns, per changelog partition that has committed records,
// the range [start, last stable offset) to read.
func stableEnds(ctx context.Context, t Target, topics map[string]string, only map[string][]int32) (map[string]map[int32]topicread.Range, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(t.Brokers...)}, t.ClientOpts...)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	names := make([]string, 0, len(topics))
	for tp := range topics {
		names = append(names, tp)
	}
	sort.Strings(names)
	starts, err := adm.ListStartOffsets(ctx, names...)
	if err != nil {
		return nil, fmt.Errorf("ops: list start offsets of %s: %w", strings.Join(names, ", "), err)
	}
	var missing []string
	for _, tp := range names {
		ps, ok := starts[tp]
		unknown := !ok
		for _, o := range ps {
			if errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
				unknown = true
			} else if o.Err != nil {
				return nil, fmt.Errorf("ops: list start offsets of %s: %w", tp, o.Err)
			}
		}
		if unknown {
			missing = append(missing, tp)
			delete(starts, tp)
		}
	}
	if len(missing) == len(names) {
		return nil, fmt.Errorf("%w: %s (has processor %q run against these brokers?)", ErrNoChangelog, strings.Join(missing, ", "), t.Group)
	}
	names = slices.DeleteFunc(names, func(tp string) bool { return slices.Contains(missing, tp) })
	lsos, err := adm.ListCommittedOffsets(ctx, names...)
	if err == nil {
		err = lsos.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("ops: list stable offsets of %s: %w", strings.Join(names, ", "), err)
	}
	out := map[string]map[int32]topicread.Range{}
	lsos.Each(func(o kadm.ListedOffset) {
		if only != nil && !contains(only[topics[o.Topic]], o.Partition) {
			return
		}
		s, ok := starts.Lookup(o.Topic, o.Partition)
		if !ok || o.Offset <= s.Offset {
			return
		}
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]topicread.Range{}
		}
		out[o.Topic][o.Partition] = topicread.Range{Start: s.Offset, End: o.Offset}
	})
	return out, nil
}

func contains(ps []int32, p int32) bool {
	for _, x := range ps {
		if x == p {
			return true
		}
	}
	return false
}

// consume reads each partition in ends from its start to its end, committed
// records only, in offset order per partition.
func consume(ctx context.Context, t Target, ends map[string]map[int32]topicread.Range, fn func(*kgo.Record) error) error {
	opts := append([]kgo.Opt{kgo.SeedBrokers(t.Brokers...)}, t.ClientOpts...)
	var fnErr error
	err := topicread.Partitions(ctx, opts, ends, topicread.Options{Stall: t.Stall}, func(r *kgo.Record) error {
		fnErr = fn(r)
		return fnErr
	})
	var stall *topicread.StallError
	switch {
	case fnErr != nil || ctx.Err() != nil:
		return err
	case errors.As(err, &stall):
		return fmt.Errorf("%w: %v", ErrStall, stall)
	case err != nil:
		return fmt.Errorf("ops: %w", err)
	}
	return nil
}
