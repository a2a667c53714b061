package eos

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/projector-dev/projector/internal/core/state"
)

// standby keeps the store's copy of tasks this member does not own – its
// standby tasks, which the group's balancer assigns (balancer.go) – as close
// to their changelogs as it can, so that taking one over restores only what
// arrived since (docs/decisions/017). It is the restore of restore.go run
// over and over on tasks nobody here processes: each round reads every
// standby task's changelog from the offset the store holds up to the
// partition's last stable offset, writing each chunk with its offset.
//
// One writer per task (docs/design.md#one-writer-per-task): the loop and the
// standby never write a task's keys at the same time. The loop owns the set
// of standby tasks and changes it only between transactions (set): a task it
// takes over leaves the set, and set returns only once the standby's read of
// it has stopped; a task the loop gives up enters the set only after the
// loop's last Pebble write for it has landed (Loop.updateStandby settles
// first). Tasks a standby tails are disjoint from the owned ones, so its
// writes touch no key the loop reads, and a restore forgets exactly the
// cached values it replaces (state.Store.Restore).
//
// A task's read that fails (a broker error, a corrupt record, a stall) is
// logged and retried on its own, with backoff; the other tasks go on. A
// failed store (state.ErrFatal) stops the loop (err). After each read that
// reached the end, Config.StandbyTidy runs for the task: what the owner's
// transactions would have deleted locally (expired dedup entries) and no
// changelog record tells a standby.
//
// Goroutines: run owns the reading and the restorer's client; set is called
// from the loop goroutine, err from any.
type standby struct {
	r   *restorer
	cfg *Config

	mu   sync.Mutex
	want map[state.Task]bool // the tasks to tail, as the loop last set them
	// gen counts the calls of set; since holds, per wanted task, the gen in
	// which it (re)entered the set. A round reads only the tasks wanted
	// since before it listed the changelogs' offsets: a task that left and
	// came back meanwhile may have been written by the loop past the
	// offsets listed, and against those the store would look ahead of its
	// changelog (and be reset). The next round, which set starts at once,
	// reads it.
	gen   uint64
	since map[state.Task]uint64
	// cur is the task run is reading now (curOn), with the cancel of that
	// read and a channel closed when it has stopped.
	cur       state.Task
	curOn     bool
	curCancel context.CancelFunc
	curDone   chan struct{}
	// caught holds the tasks whose last read reached the end the round
	// listed (Stats.Standby's caught-up count).
	caught map[state.Task]bool
	// retry holds the tasks whose last read failed: not read again before
	// at, and the backoff after the next failure.
	retry map[state.Task]retryAt
	fatal error // a failed store: the loop stops with it (err)

	changed chan struct{} // set changed the tasks: run starts a round now
}

// retryAt is when a task whose read failed is read again, and the backoff
// that follows a further failure.
type retryAt struct {
	at      time.Time
	backoff time.Duration
}

// standbyInterval is how long run waits between rounds when nothing changed:
// the most a standby trails its changelog by, beyond the time a round takes.
const standbyInterval = 250 * time.Millisecond

// standbyBackoffMax bounds the wait before a failed task is read again.
const standbyBackoffMax = 30 * time.Second

func newStandby(r *restorer) *standby {
	return &standby{r: r, cfg: r.cfg, want: map[state.Task]bool{}, since: map[state.Task]uint64{},
		caught: map[state.Task]bool{}, retry: map[state.Task]retryAt{}, changed: make(chan struct{}, 1)}
}

// set replaces the standby tasks. A task leaving the set stops being read
// before set returns: its store is then the loop's alone.
func (s *standby) set(tasks map[state.Task]bool) {
	s.mu.Lock()
	s.gen++
	for id := range tasks {
		if !s.want[id] {
			s.since[id] = s.gen
		}
	}
	s.want = tasks
	maps.DeleteFunc(s.caught, func(id state.Task, _ bool) bool { return !tasks[id] })
	maps.DeleteFunc(s.since, func(id state.Task, _ uint64) bool { return !tasks[id] })
	maps.DeleteFunc(s.retry, func(id state.Task, _ retryAt) bool { return !tasks[id] })
	var wait chan struct{}
	if s.curOn && !tasks[s.cur] {
		s.curCancel()
		wait = s.curDone
	}
	s.mu.Unlock()
	s.r.stats.setStandby(len(tasks), s.caughtUp())
	select {
	case s.changed <- struct{}{}:
	default:
	}
	if wait != nil {
		<-wait
	}
}

// err is the store failure that stopped the standby, if any.
func (s *standby) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fatal
}

// caughtUp counts the standby tasks whose last read reached the changelog's
// end as listed at its start.
func (s *standby) caughtUp() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.caught)
}

// run tails the standby tasks until ctx ends or the store fails.
func (s *standby) run(ctx context.Context) {
	for ctx.Err() == nil && s.err() == nil {
		s.round(ctx)
		select {
		case <-ctx.Done():
		case <-s.changed:
		case <-time.After(standbyInterval):
		}
	}
}

// round reads every standby task up to its changelog's last stable offset.
func (s *standby) round(ctx context.Context) {
	s.mu.Lock()
	gen := s.gen
	byTopic := make(map[string][]state.Task)
	for id := range s.want {
		cl := s.cfg.ChangelogOf(id.Topic)
		byTopic[cl] = append(byTopic[cl], id)
	}
	s.mu.Unlock()
	adm := kadm.NewClient(s.r.cl)
	for _, topic := range slices.Sorted(maps.Keys(byTopic)) {
		tasks := byTopic[topic]
		slices.SortFunc(tasks, compareTasks)
		hwms, err := adm.ListEndOffsets(ctx, topic)
		if err == nil {
			err = hwms.Error()
		}
		var lsos kadm.ListedOffsets
		if err == nil {
			lsos, err = s.r.stableOffsets(ctx, adm, topic, hwms, false)
		}
		if err != nil {
			for _, id := range tasks {
				s.done(id, fmt.Errorf("eos: standby: list the offsets of %s: %w", topic, brokerErr(err)))
			}
			continue
		}
		for _, id := range tasks {
			if ctx.Err() != nil {
				return
			}
			lo, ok := lsos.Lookup(topic, id.Partition)
			hw, ok2 := hwms.Lookup(topic, id.Partition)
			if !ok || !ok2 || lo.Err != nil {
				s.done(id, fmt.Errorf("eos: standby %s: changelog partition %s/%d: %w", id, topic, id.Partition,
					brokerErr(cmp.Or(lo.Err, errors.New("no offsets listed")))))
				continue
			}
			s.tail(ctx, id, topic, lo.Offset, hw.Offset, gen)
		}
	}
}

// tail reads one standby task up to end, if it is due (wanted since before
// gen, not waiting for a retry), unless the loop takes it away first (set),
// which cancels the read: not an error.
func (s *standby) tail(ctx context.Context, id state.Task, topic string, end, hwm int64, gen uint64) {
	s.mu.Lock()
	if !s.want[id] || s.since[id] > gen || time.Now().Before(s.retry[id].at) {
		s.mu.Unlock()
		return
	}
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	s.cur, s.curOn, s.curCancel, s.curDone = id, true, cancel, done
	s.mu.Unlock()
	_, err := s.r.restoreTask(tctx, id, topic, end, hwm)
	if err == nil && s.cfg.StandbyTidy != nil {
		err = s.cfg.StandbyTidy(id, s.cfg.Now())
	}
	taken := tctx.Err() != nil && ctx.Err() == nil
	cancel()
	s.mu.Lock()
	s.curOn = false
	close(done)
	s.mu.Unlock()
	if taken || ctx.Err() != nil {
		return
	}
	s.done(id, err)
}

// done records the outcome of a task's read: caught up, or failed (logged,
// retried after a backoff; a failed store stops the standby and the loop).
func (s *standby) done(id state.Task, err error) {
	s.mu.Lock()
	defer func() {
		caught := len(s.caught)
		s.mu.Unlock()
		s.r.stats.setStandby(-1, caught)
	}()
	if !s.want[id] {
		return
	}
	if err == nil {
		s.caught[id] = true
		delete(s.retry, id)
		return
	}
	delete(s.caught, id)
	if errors.Is(err, state.ErrFatal) {
		s.fatal = err
		return
	}
	backoff := cmp.Or(s.retry[id].backoff, restoreBackoffMin)
	s.retry[id] = retryAt{at: time.Now().Add(backoff), backoff: min(2*backoff, standbyBackoffMax)}
	var te *transientError
	if errors.As(err, &te) {
		s.cfg.Logger.Warn("standby replica: reading a changelog failed on a broker error; retrying", "task", id.String(), "err", err, "in", backoff)
	} else {
		s.cfg.Logger.Error("standby replica: cannot tail a changelog; retrying (a takeover of the task restores it, and fails the same way if the cause stays)",
			"task", id.String(), "err", err, "in", backoff)
	}
}

// startStandby starts tailing the standby tasks, on a client of their own;
// stop ends the tailing and waits for it.
func (l *Loop[T]) startStandby(ctx context.Context) (stop func(), err error) {
	cl, err := l.newRestoreClient()
	if err != nil {
		return nil, err
	}
	r := l.newRestorer(cl)
	r.standby = true
	// The loop's settle is the loop goroutine's; a standby task has no
	// write of the loop in flight (updateStandby settles before handing
	// one over), and the standby never calls restore, which would use it.
	r.settle = nil
	l.sb = newStandby(r)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.sb.run(sctx)
	}()
	return func() {
		cancel()
		<-done
		cl.Close()
	}, nil
}

// positions is what the balancer offers the group for this member: the next
// changelog offset of every task the store holds (state.Store.Positions);
// none once Run has ended (storeDone): the store may be closed by then.
func (l *Loop[T]) positions() map[state.Task]int64 {
	l.storeMu.Lock()
	defer l.storeMu.Unlock()
	if l.storeDone {
		return nil
	}
	p, err := l.cfg.Store.Positions()
	if err != nil {
		l.cfg.Logger.Warn("standby replicas: cannot read the store's changelog positions; joining the group without them", "err", err)
		return nil
	}
	return p
}

// onStandby is the balancer's callback with this member's standby tasks
// from a sync of the group (on kgo's goroutine): it records them for the
// loop (updateStandby).
func (l *Loop[T]) onStandby(tasks []state.Task) {
	want := make(map[state.Task]bool, len(tasks))
	for _, id := range tasks {
		want[id] = true
	}
	l.mu.Lock()
	l.standbyWant, l.standbyChanged, l.standbySynced = want, true, true
	l.mu.Unlock()
}

// updateStandby hands the standby the tasks the group wants tailed here
// that the loop does not own (pending tasks are about to be owned), when
// the wanted or the owned tasks changed (force: a task was revoked). A task
// the loop gave up may have its last transaction's Pebble write in flight:
// it lands first (one-writer-per-task), and set returns once a task the loop
// takes over is no longer read.
func (l *Loop[T]) updateStandby(pending map[state.Task]bool, force bool) error {
	if l.sb == nil {
		return nil
	}
	l.mu.Lock()
	changed, want := l.standbyChanged || force, l.standbyWant
	l.standbyChanged = false
	l.mu.Unlock()
	if !changed {
		return nil
	}
	tail := make(map[state.Task]bool, len(want))
	for id := range want {
		if _, owned := l.tasks[id]; !owned && !pending[id] {
			tail[id] = true
		}
	}
	if err := l.settle(); err != nil {
		return err
	}
	l.sb.set(tail)
	return nil
}
