package eos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/changelog"
	"github.com/projector-dev/projector/internal/core/state"
)

// restorer reads changelog partitions into Pebble.
type restorer struct {
	cfg   *Config
	stats *Stats
	// settle finishes the loop's Pebble write in flight (Loop.settle).
	settle func() error
	cl     *kgo.Client
	// retentions caches each changelog topic's delete.retention.ms.
	retentions map[string]retention
	// standby: the restorer tails standby tasks (standby.go): its records
	// count as Stats.Standby's, and each read logs at debug level.
	standby bool
	// restored hands restored tasks to their handlers (Loop.restored):
	// TaskHandler.Restored, then the Handler's AfterRestore.
	restored func([]*Task) error
}

const restoreChunk = 10000

// restoreStall is how long a restore may see no changelog record before it
// gives up with an error.
const restoreStall = 30 * time.Second

// restore brings each task's Pebble state up to its changelog partition's last
// stable offset, then lets the handler rebuild its in-memory state. With
// settle (verification), it first waits (up to the transaction timeout) for
// the last stable offset to reach the high watermark seen at the start, so
// that a zombie's open transaction cannot hide transactions committed after
// it by others, and marks each task verified before its Restored call.
//
// Transient broker errors (a fetch or offset listing that fails, a leader
// moving, UNKNOWN_SERVER_ERROR from a topic just created) are retried with
// backoff until ctx ends: a restore resumes from the offset the store
// reflects, so a retry repeats no write. Fencing, authorization and state
// store errors, and corrupt changelog records, stop the loop.
func (r *restorer) restore(ctx context.Context, ts []*Task, settle bool) error {
	// Pebble must hold every committed transaction before it is compared
	// with the changelog.
	if err := r.settle(); err != nil {
		return err
	}
	for _, t := range ts {
		t.RestoredRecords = 0 // summed over the attempts below
	}
	backoff := restoreBackoffMin
	for {
		err := r.restoreOnce(ctx, ts, settle)
		var te *transientError
		if err == nil || !errors.As(err, &te) || ctx.Err() != nil {
			return err
		}
		r.stats.addRestoreRetry()
		r.cfg.Logger.Warn("restore failed on a broker error; retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, restoreBackoffMax)
	}
}

// Backoff bounds between restore attempts.
const (
	restoreBackoffMin = 100 * time.Millisecond
	restoreBackoffMax = 5 * time.Second
)

// transientError is a broker-side restore failure worth retrying.
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }

func (e *transientError) Unwrap() error { return e.err }

// brokerErr marks a Kafka error met during a restore as transient, unless it
// is one after which the loop must stop (fencing, authorization).
func brokerErr(err error) error {
	if err == nil || isFatal(err) || errors.Is(err, kerr.ClusterAuthorizationFailed) ||
		errors.Is(err, context.Canceled) {
		return err
	}
	return &transientError{err}
}

// restoreOnce is one attempt of restore. Tasks already done in an earlier
// attempt read nothing again (their stored offset has reached the end) and
// are handed to Restored again, which is harmless.
func (r *restorer) restoreOnce(ctx context.Context, ts []*Task, settle bool) error {
	byTopic := make(map[string][]*Task)
	for _, t := range ts {
		cl := r.cfg.ChangelogOf(t.ID.Topic)
		byTopic[cl] = append(byTopic[cl], t)
	}
	adm := kadm.NewClient(r.cl)
	var done []*Task
	for topic, tasks := range byTopic {
		hwms, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = hwms.Error()
		}
		if err != nil {
			return fmt.Errorf("eos: restore: list end offsets of %s: %w", topic, brokerErr(err))
		}
		lsos, err := r.stableOffsets(ctx, adm, topic, hwms, settle)
		if err != nil {
			return err
		}
		for _, t := range tasks {
			lo, ok := lsos.Lookup(topic, t.ID.Partition)
			hw, ok2 := hwms.Lookup(topic, t.ID.Partition)
			if !ok || !ok2 || lo.Err != nil {
				return fmt.Errorf("eos: restore %s: changelog partition %s/%d: %w", t.ID, topic, t.ID.Partition,
					brokerErr(cmp.Or(lo.Err, errors.New("no offsets listed"))))
			}
			n, err := r.restoreTask(ctx, t.ID, topic, lo.Offset, hw.Offset)
			t.RestoredRecords += n
			if err != nil {
				return err
			}
			if settle {
				t.verified = true
			}
			done = append(done, t)
		}
	}
	return r.restored(done)
}

// stableOffsets lists the last stable offsets of topic; with settle it waits
// until each has reached the high watermark in hwms, for at most the
// transaction timeout (the broker aborts any transaction older than that).
func (r *restorer) stableOffsets(ctx context.Context, adm *kadm.Client, topic string, hwms kadm.ListedOffsets, settle bool) (kadm.ListedOffsets, error) {
	deadline := time.Now().Add(r.cfg.TransactionTimeout + 5*time.Second)
	for {
		lsos, err := adm.ListCommittedOffsets(ctx, topic)
		if err == nil {
			err = lsos.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("eos: restore: list stable offsets of %s: %w", topic, brokerErr(err))
		}
		behind := false
		lsos.Each(func(o kadm.ListedOffset) {
			if hw, ok := hwms.Lookup(topic, o.Partition); ok && o.Offset < hw.Offset {
				behind = true
			}
		})
		if !settle || !behind || time.Now().After(deadline) {
			if behind && settle {
				r.cfg.Logger.Warn("a transaction on the changelog stayed open past the transaction timeout; restoring to its last stable offset", "topic", topic)
			}
			return lsos, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// restoreBatch bounds the Pebble writes of one restore batch: a batch is
// written once it reaches this size, so it holds at most this many plus
// one record's expansion (a dedup segment: 2048 entries and its marker).
const restoreBatch = 100000

// restoreTask brings task id's store up to offset end of its changelog
// partition in topic (hwm: the partition's high watermark). It returns how
// many changelog records it wrote into the store, a reset of local state
// counting as one: 0 means the store did not change.
func (r *restorer) restoreTask(ctx context.Context, id state.Task, topic string, end, hwm int64) (int, error) {
	st := r.cfg.Store
	from, matched, stored, err := st.ChangelogPosition(id)
	if err != nil {
		return 0, err
	}
	pos := storedPosition{from: from, matched: matched, stored: stored}
	discard, err := r.mustDiscard(ctx, id, topic, pos, end, hwm)
	if err != nil {
		return 0, err
	}
	reset := 0
	if discard {
		if err := st.Reset(id); err != nil {
			return 0, err
		}
		from = 0
		reset = 1 // the store changed even if nothing is read back
	}
	if from >= end {
		if stored && reset == 0 && from == end && st.Now().Sub(matched) > matchRefresh {
			// Nothing to read: the store matches the changelog now.
			if err := st.MarkMatched(id); err != nil {
				return 0, err
			}
		}
		return reset, nil
	}
	start := time.Now()
	n, err := r.readChangelog(ctx, id, topic, from, end, reset)
	if err != nil {
		return n, err
	}
	if n > 0 {
		log := r.cfg.Logger.Info
		if r.standby {
			log = r.cfg.Logger.Debug
		}
		log("restored state from changelog", "standby", r.standby, "task", id.String(), "records", n, "from", from, "to", end, "took", time.Since(start).Round(time.Millisecond))
	}
	return n, nil
}

// storedPosition is where a task's store stands against its changelog
// (state.Store.ChangelogPosition).
type storedPosition struct {
	from    int64     // the next changelog offset to restore from
	matched time.Time // when the store last matched the changelog (zero: unknown)
	stored  bool      // false: the task was never seen here
}

// mustDiscard reports whether the task's local state must be dropped and
// restored from offset 0, and logs why: the store is ahead of the changelog,
// or it must catch up but may have missed deletions compaction removed.
func (r *restorer) mustDiscard(ctx context.Context, id state.Task, topic string, pos storedPosition, end, hwm int64) (bool, error) {
	if pos.from > hwm {
		// Our cache reflects offsets the changelog does not have: it was
		// deleted and recreated. The changelog is the truth, so drop the
		// task's local state (atomically with its offset) and start over.
		// (A stored offset above the last stable offset but within the high
		// watermark is normal: another producer's open transaction holds the
		// last stable offset back.)
		r.cfg.Logger.Warn("local state is ahead of the changelog; discarding it", "task", id.String(), "stored", pos.from, "changelogEnd", hwm)
		return true, nil
	}
	if !pos.stored || pos.from >= end {
		return false, nil
	}
	// A store that must catch up may only resume from its offset if every
	// tombstone written since is still in the changelog (docs/decisions/007);
	// otherwise it may keep keys the changelog deleted, such as a held event
	// that makes a genuine one look stale.
	why, err := r.staleStore(ctx, topic, pos.matched)
	if err != nil || why == "" {
		return false, err
	}
	r.cfg.Logger.Warn("local state may miss deletions the changelog compacted away; restoring from scratch",
		"task", id.String(), "stored", pos.from, "changelogEnd", end, "why", why)
	return true, nil
}

// changelogRead is one task's read of its changelog partition into Pebble,
// in chunks of at most restoreBatch writes, each written with the offset
// after it.
type changelogRead struct {
	r     *restorer
	id    state.Task
	topic string
	now   time.Time // the restore's time, for Config.Restore
	next  int64     // the offset after the last record read
	chunk []state.Record
	recs  int // changelog records behind chunk
	n     int // changelog records restored (and the reset, if any)
}

// readChangelog reads task id's changelog partition in topic from offset
// from up to end into the store. It returns the restored count, starting at
// n (a reset), or 0 with an error that may have left a chunk unwritten.
func (r *restorer) readChangelog(ctx context.Context, id state.Task, topic string, from, end int64, n int) (int, error) {
	r.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: {id.Partition: kgo.NewOffset().At(from)}})
	defer r.cl.RemoveConsumePartitions(map[string][]int32{topic: {id.Partition}})
	c := &changelogRead{r: r, id: id, topic: topic, next: from, n: n, now: r.cfg.Now()}
	lastProgress := time.Now()
	for c.next < end {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := r.cl.PollRecords(pctx, restoreChunk)
		cancel()
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		if err := restorePollError(fs); err != nil {
			return c.n, fmt.Errorf("eos: restore %s: %w", id, brokerErr(err))
		}
		got, err := c.take(fs)
		if err != nil {
			return 0, err
		}
		if got == 0 {
			// Every transaction ends with a marker the restore client keeps,
			// so the range up to the last stable offset always has a last
			// record to read. Silence means the broker is not serving it:
			// fail loudly rather than call a partial restore complete.
			if time.Since(lastProgress) > restoreStall {
				return c.n, brokerErr(fmt.Errorf("eos: restore %s stalled at changelog offset %d (want %d) for %s", id, c.next, end, restoreStall))
			}
			continue
		}
		lastProgress = time.Now()
		if err := c.write(); err != nil {
			return 0, err
		}
	}
	return c.n, nil
}

// restorePollError is the last error of a restore poll other than the end of
// its own wait.
func restorePollError(fs kgo.Fetches) error {
	var ferr error
	fs.EachError(func(_ string, _ int32, err error) {
		if !errors.Is(err, context.DeadlineExceeded) {
			ferr = err
		}
	})
	return ferr
}

// take adds the polled records of the task's changelog partition from
// c.next on to the chunk, through Config.Restore, writing the chunk whenever
// it is full. got counts the records read, control records included.
func (c *changelogRead) take(fs kgo.Fetches) (got int, err error) {
	restore := c.r.cfg.Restore
	emit := func(k, v []byte) { c.chunk = append(c.chunk, state.Record{Key: k, Value: v}) }
	fs.EachRecord(func(rec *kgo.Record) {
		if err != nil || rec.Topic != c.topic || rec.Partition != c.id.Partition || rec.Offset < c.next {
			return
		}
		got++
		c.next = rec.Offset + 1
		if rec.Attrs.IsControl() {
			return
		}
		had := len(c.chunk)
		if restore != nil {
			if rerr := restore(rec.Key, rec.Value, c.now, emit); rerr != nil {
				err = &changelog.CorruptError{Task: c.id.String(), Topic: c.topic, Partition: rec.Partition,
					Offset: rec.Offset, Key: rec.Key, Err: rerr}
				return
			}
		} else {
			emit(rec.Key, rec.Value)
		}
		if len(c.chunk) > had {
			c.n++
			c.recs++
		}
		if len(c.chunk) >= restoreBatch {
			// Expanded records (dedup segments) can make a poll's
			// batch large: write what is complete, with its offset.
			err = c.write()
		}
	})
	return got, err
}

// write applies the chunk of restored writes with the offset after them,
// and empties it.
func (c *changelogRead) write() error {
	if err := c.r.cfg.Store.Restore(c.id, c.chunk, c.next); err != nil {
		return err
	}
	if c.r.standby {
		c.r.stats.addStandbyRestored(c.recs)
	} else {
		c.r.stats.addRestored(c.recs)
	}
	c.chunk, c.recs = c.chunk[:0], 0
	return nil
}
