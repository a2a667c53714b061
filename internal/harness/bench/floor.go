package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/harness/testkit"
)

// copyLoop is the transport floor: the processor's session settings, read
// committed, one transaction per poll of up to Batch records, every record
// copied to an output topic – or, with copies > 1, to that many topics.
func copyLoop(ctx context.Context, o Options, brokers []string, input, name string, want int64, copies int) (Phase, error) {
	ph := Phase{Name: "transport floor"}
	if copies > 1 {
		ph.Name = fmt.Sprintf("transport floor ×%d", copies)
	}
	f := &floor{batch: o.Batch, outs: make([]string, copies)}
	for c := range f.outs {
		f.outs[c] = name + ".out"
		if c > 0 {
			f.outs[c] += strconv.Itoa(c + 1)
		}
		if err := testkit.CreateTopic(ctx, brokers, f.outs[c], int32(o.Partitions)); err != nil {
			return ph, fmt.Errorf("bench: create %s: %w", f.outs[c], err)
		}
	}
	written := new(writeCounter)
	var err error
	f.sess, err = kgo.NewGroupTransactSession(append(eos.ClientTuning(),
		kgo.WithHooks(written),
		kgo.SeedBrokers(brokers...),
		kgo.TransactionalID(name+"-bench"),
		kgo.TransactionTimeout(40*time.Second),
		kgo.ConsumerGroup(name),
		kgo.ConsumeTopics(input),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.SessionTimeout(45*time.Second),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
	)...)
	if err != nil {
		return ph, fmt.Errorf("bench: floor session: %w", err)
	}
	err = runUntilCaughtUp(ctx, "transport floor", brokers, name, input, &ph, f.loop)
	f.sess.Close()
	if err != nil {
		return ph, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ph.Records, ph.Txns, ph.Aborted = f.committed, int64(len(f.lat)), f.aborted
	ph.P50, ph.P99 = percentile(f.lat, 0.50), percentile(f.lat, 0.99)
	ph.Written = written.n.Load()
	return ph, nil
}

// floor is the copy loop of the transport floor and what it counted.
type floor struct {
	sess  *kgo.GroupTransactSession
	outs  []string
	batch int

	mu        sync.Mutex
	lat       []time.Duration
	committed int64
	aborted   int64
}

// loop copies polls in transactions until runCtx ends or the client closes.
func (f *floor) loop(runCtx context.Context) error {
	for runCtx.Err() == nil {
		pollCtx, cancel := context.WithTimeout(runCtx, 250*time.Millisecond)
		fs := f.sess.PollRecords(pollCtx, f.batch)
		cancel()
		if fs.IsClientClosed() {
			return nil
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("fetch %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return ferr
		}
		if fs.NumRecords() == 0 {
			continue
		}
		if err := f.copyTxn(fs); err != nil {
			return err
		}
	}
	return nil
}

// copyTxn copies one poll's records to the outputs in one transaction,
// aborted when a produce failed, and counts it.
func (f *floor) copyTxn(fs kgo.Fetches) error {
	n := fs.NumRecords()
	t0 := time.Now()
	if err := f.sess.Begin(); err != nil {
		return err
	}
	// Not runCtx: a transaction that started finishes.
	tctx, tcancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer tcancel()
	cl := f.sess.Client()
	var perr error
	var pmu sync.Mutex
	fs.EachRecord(func(r *kgo.Record) {
		for _, out := range f.outs {
			cl.Produce(tctx, &kgo.Record{Topic: out, Key: r.Key, Value: r.Value, Headers: r.Headers},
				func(_ *kgo.Record, err error) {
					if err != nil {
						pmu.Lock()
						perr = err
						pmu.Unlock()
					}
				})
		}
	})
	if err := cl.Flush(tctx); err != nil {
		return err
	}
	commit := kgo.TryCommit
	if perr != nil {
		commit = kgo.TryAbort
	}
	ok, err := f.sess.End(tctx, commit)
	if err != nil {
		return fmt.Errorf("end transaction: %w", err)
	}
	f.mu.Lock()
	if ok && commit == kgo.TryCommit {
		f.committed += int64(n)
		f.lat = append(f.lat, time.Since(t0))
	} else {
		f.aborted++
	}
	f.mu.Unlock()
	return nil
}

// writeCounter is a kgo hook that counts the records brokers acknowledged.
type writeCounter struct{ n atomic.Int64 }

var _ kgo.HookProduceRecordUnbuffered = (*writeCounter)(nil)

func (w *writeCounter) OnProduceRecordUnbuffered(_ *kgo.Record, err error) {
	if err == nil {
		w.n.Add(1)
	}
}
