package rebuild

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/topicread"
)

// DiffOptions configure Diff.
type DiffOptions struct {
	Brokers    []string
	ClientOpts []kgo.Opt // TLS, SASL
	A, B       string    // topics
	Max        int       // how many differences to list (DefaultDiffMax is the CLI's); negative lists all
}

// ErrNoTopic reports a topic that does not exist.
var ErrNoTopic = errors.New("rebuild: topic does not exist")

// Diff reads both topics read_committed up to their end offsets at the time
// of the call and compares them key by key.
func Diff(ctx context.Context, o DiffOptions) (*DiffReport, error) {
	type read struct {
		m   map[string]Entry
		n   int
		err error
	}
	// Both topics are read at once; the first failure stops the other read.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ra, rb := make(chan read, 1), make(chan read, 1)
	for _, x := range []struct {
		topic string
		c     chan read
	}{{o.A, ra}, {o.B, rb}} {
		go func() {
			m, n, err := ReadLatest(rctx, o.Brokers, o.ClientOpts, x.topic)
			if err != nil {
				cancel()
			}
			x.c <- read{m, n, err}
		}()
	}
	a, b := <-ra, <-rb
	for _, err := range []error{a.err, b.err} {
		if err != nil && (ctx.Err() != nil || !errors.Is(err, context.Canceled)) {
			return nil, err
		}
	}
	if err := errors.Join(a.err, b.err); err != nil {
		return nil, err
	}
	r := Compare(a.m, b.m, o.Max)
	r.A, r.B, r.RecordsA, r.RecordsB = o.A, o.B, a.n, b.n
	return &r, nil
}

// ReadLatest reads topic read_committed from the start to its last stable
// offsets at the time of the call and returns the last entry per key and the
// number of records read.
func ReadLatest(ctx context.Context, brokers []string, copts []kgo.Opt, topic string) (map[string]Entry, int, error) {
	out := map[string]Entry{}
	n := 0
	err := topicread.Committed(ctx, append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, copts...), topic, func(r *kgo.Record) {
		n++
		out[string(r.Key)] = entryOf(r.Value)
	})
	if errors.Is(err, topicread.ErrNoTopic) {
		return nil, 0, fmt.Errorf("%w: %s", ErrNoTopic, topic)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("rebuild: %w", err)
	}
	return out, n, nil
}
