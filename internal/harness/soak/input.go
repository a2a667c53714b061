package soak

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/harness/workload"
)

// feeder produces the input: in chunks, at rate (a twentieth of it every
// 50ms), while the worker is killed and restarted, pausing while a second's
// worth waits uncommitted; after unthrottle, the rest at once. brokerMu keeps
// a broker restart out of a chunk (a half-produced chunk retried would
// duplicate the conflicts and invalid records whose dead letters the checker
// counts exactly).
type feeder struct {
	brokerMu   sync.RWMutex
	prod       *kgo.Client
	done       chan error
	unthrottle chan struct{}
	cancel     context.CancelFunc
	producing  bool
	logf       func(string, ...any)
}

// startFeeder starts producing recs to the input topic.
func startFeeder(ctx context.Context, brokers []string, off *offsets, recs []workload.Record, rate int, logf func(string, ...any)) (*feeder, error) {
	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DisableIdempotentWrite(), kgo.ProducerLinger(0),
		kgo.MaxBufferedRecords(100_000), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		return nil, err
	}
	pctx, pcancel := context.WithCancel(ctx)
	f := &feeder{prod: prod, done: make(chan error, 1), unthrottle: make(chan struct{}), cancel: pcancel, producing: true, logf: logf}
	go func() { f.done <- f.feed(pctx, off, recs, rate) }()
	return f, nil
}

// close stops producing.
func (f *feeder) close() {
	f.cancel()
	f.prod.Close()
}

// feed produces recs, paced until unthrottled.
func (f *feeder) feed(pctx context.Context, off *offsets, recs []workload.Record, rate int) error {
	const ticks = 20 // a second
	chunk, backlog := max(rate/ticks, 1), int64(max(rate, 1))
	tick := time.NewTicker(time.Second / ticks)
	defer tick.Stop()
	throttled := true
	for i := 0; i < len(recs); {
		n := 5000
		if throttled {
			select {
			case <-pctx.Done():
				return pctx.Err()
			case <-f.unthrottle:
				throttled = false
				continue
			case <-tick.C:
			}
			if p, err := off.pending(pctx); err != nil || p >= backlog {
				continue
			}
			n = chunk
		}
		f.brokerMu.RLock()
		err := produce(pctx, f.prod, recs[i:min(i+n, len(recs))])
		f.brokerMu.RUnlock()
		if err != nil {
			return err
		}
		i += n
	}
	return nil
}

// inputDone reports whether the input is all produced (waiting for it with
// block), and a failed production.
func (f *feeder) inputDone(block bool) error {
	if !f.producing {
		return nil
	}
	if block {
		if err := <-f.done; err != nil {
			return fmt.Errorf("soak: produce: %w", err)
		}
	} else {
		select {
		case err := <-f.done:
			if err != nil {
				return fmt.Errorf("soak: produce: %w", err)
			}
		default:
			return nil
		}
	}
	f.producing = false
	f.logf("input complete")
	return nil
}

// produce writes recs to the input, key-hash partitioned like
// testkit.Produce, synchronously. The client is not idempotent: no request
// is in flight across a broker restart (brokerMu), and the restarted broker
// need not know the producer's sequence numbers.
func produce(ctx context.Context, cl *kgo.Client, recs []workload.Record) error {
	batch := make([]*kgo.Record, 0, len(recs))
	for _, r := range recs {
		batch = append(batch, &kgo.Record{Topic: InputTopic, Key: r.Key, Value: r.Value})
	}
	return cl.ProduceSync(ctx, batch...).FirstErr()
}
