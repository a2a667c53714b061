package ops

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/topicread"
)

// stableEnds returns, per changelog partition that has committed records,
// the range [start, last stable offset) to read (topicread.StableEnds).
func stableEnds(ctx context.Context, t Target, topics map[string]string, only map[string][]int32) (map[string]map[int32]topicread.Range, error) {
	names := slices.Sorted(maps.Keys(topics))
	ends, missing, err := topicread.StableEnds(ctx, t.opts(), names...)
	if err != nil {
		return nil, fmt.Errorf("ops: %w", err)
	}
	if len(missing) == len(names) {
		return nil, fmt.Errorf("%w: %s (has processor %q run against these brokers?)", ErrNoChangelog, strings.Join(missing, ", "), t.Group)
	}
	for tp, ps := range ends {
		for p := range ps {
			if only != nil && !slices.Contains(only[topics[tp]], p) {
				delete(ps, p)
			}
		}
	}
	return ends, nil
}

// consume reads each partition in ends from its start to its end, committed
// records only, in offset order per partition.
func consume(ctx context.Context, t Target, ends map[string]map[int32]topicread.Range, fn func(*kgo.Record) error) error {
	var fnErr error
	err := topicread.Partitions(ctx, t.opts(), ends, topicread.Options{Stall: t.Stall}, func(r *kgo.Record) error {
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

// opts are the client options that reach t's brokers.
func (t Target) opts() []kgo.Opt {
	return append([]kgo.Opt{kgo.SeedBrokers(t.Brokers...)}, t.ClientOpts...)
}
