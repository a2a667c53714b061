package eos

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/acl"
	"github.com/projector-dev/projector/internal/core/state"
)

// Handler gives meaning to records. It makes one TaskHandler per owned task
// (goka's PartitionProcessor model), which the loop calls for that task's
// work, and does the loop-wide work itself. T is the handler's own
// TaskHandler type: Loop.Tasks hands the owned tasks' handlers back to it as
// they are, so loop-wide work reaches each task's state typed. All methods
// run on the loop goroutine.
type Handler[T TaskHandler] interface {
	// NewTask returns the handler of a newly assigned task, before the
	// task's first restore. The loop calls the returned TaskHandler for the
	// task until it revokes it; a task assigned again gets a new one.
	NewTask(t *Task) T
	// Due reports whether the handler has work to do in a transaction even
	// without records (expired gaps, ledger updates).
	Due(now time.Time) bool
	// Begin runs first in every transaction, for that work.
	Begin(b *Batch) error
}

// TaskHandler is a Handler's state and work for one owned task. Its methods
// run on the loop goroutine, except Process, Stage and Restored with
// Config.Parallel: then on the goroutine processing the task's batch, or
// taking up its restored state (one at a time per task).
type TaskHandler interface {
	// Restored is called after the task's state was restored (again), with
	// no transaction open: rebuild in-memory indexes from the store here.
	Restored() error
	// Process handles one record of the task, owned and restored, in its
	// batch b.
	Process(b *Batch, r *kgo.Record) error
	// Stage runs once per batch b of the task in a transaction, after its
	// records were processed and on the goroutine that processed them (the
	// loop's, for a batch without records), before the batch's changelog
	// records are produced: the handler puts what it collected over the
	// batch into b.Txn there (the processor's dedup segment).
	Stage(b *Batch)
	// Revoked is called when the task is no longer owned; the loop calls
	// the TaskHandler no more.
	Revoked()
}

// Task is one owned input partition.
type Task struct {
	ID     state.Task
	Prefix []byte
	// h is the task's handler (Handler.NewTask), which the loop calls for
	// the task's work.
	h TaskHandler
	// RestoredRecords is how many changelog records the latest restore
	// wrote into the store for this task (a reset of local state counts as
	// one): 0 means the store did not change.
	RestoredRecords int

	verified bool
	since    time.Time
	// inOffsets: the client has listed the task's partition among its
	// committed or uncommitted offsets since the assignment. When it stops
	// doing so the partition was revoked or lost (see Loop.dropLost).
	inOffsets bool
	// stagedHint is how many keys the task's last transaction staged: the
	// next one's staging map starts that large (consecutive transactions
	// stage similar numbers, and growing a map of thousands of keys step by
	// step cost more than the staging itself).
	stagedHint int
}

// Verified reports whether the task's state has been restored after the
// group fetched its committed offsets: any transaction of a previous owner
// has resolved and is in the store. Only verified tasks may be changed
// (Batch.For) or acted on outside the store (the executor's calls).
func (t *Task) Verified() bool { return t.verified }

// Config configures a Loop.
type Config struct {
	Group           string // consumer group
	TransactionalID string
	// Session: who the worker is in Kafka (InstanceID, when set, makes it
	// a static member of the group: KIP-345, docs/decisions/006), its
	// store and the transaction bounds; declared once, in userconfig.go.
	Session
	Inputs []string
	// ChangelogOf names the changelog topic of an input topic.
	ChangelogOf func(input string) string
	// Topics the loop creates when missing (changelogs are added).
	OutputTopics []TopicSpec
	// Needs are Kafka permissions the user needs beyond the loop's own
	// (access.go), checked with them before the loop starts: the
	// executor's outcome reports write to its input, say.
	Needs []acl.Need
	// CreateInputs creates missing input topics with Partitions partitions
	// (the embedded broker). Off, a missing input is waited for, reported
	// in the log and by Stats.Readiness, never created: on a real cluster
	// an input's partition count is the operator's decision.
	CreateInputs bool
	// InternalInputs are inputs the loop's user owns (the ingress's claims
	// topic), each also listed in Inputs: a missing one is created as its
	// spec says whatever CreateInputs is, and never waited for.
	InternalInputs []TopicSpec

	// StartOffset is where a group with no committed offset starts
	// (default: the earliest offset).
	StartOffset *kgo.Offset

	// Restore turns one changelog record (value nil: a tombstone) into the
	// Pebble writes it stands for, calling emit for each (value nil: a
	// deletion; emit keeps both slices). Nil restores every record as it
	// is. The processor drops expired dedup entries here and expands each
	// dedup segment into its entries (state.Txn.SetLogged). An error (a
	// corrupt record) fails the restore.
	Restore func(changelogKey, value []byte, now time.Time, emit func(key, value []byte)) error
	Stats   *Stats
	// Parallel lets TaskHandler.Process, Stage and Restored run
	// concurrently for different tasks (one goroutine per task at a time,
	// up to GOMAXPROCS): the handler must keep no state shared between
	// tasks outside each task's TaskHandler and Batch (AfterRestore does
	// the loop-wide work of a restore).
	Parallel bool
	// AsyncCommit writes a committed transaction's state to Pebble in the
	// background while the next transaction polls and processes; the next
	// transaction reads the staged writes until they land. The commit hooks
	// then run when the write has landed: between transactions when the
	// loop is idle, otherwise once the next transaction's End returned and
	// before its own write starts (so hooks run in transaction order, but
	// after the next transaction's Begin and Process: in-memory indexes they
	// update may lag the state by one transaction), and always before a
	// restore and before Run returns. Off, they run before transact returns
	// (the executor's Runners wait on them).
	AsyncCommit bool
	// StandbyReplicas is how many other members keep a standby copy of each
	// task's state, tailing its changelog (standby.go, docs/decisions/017);
	// the group's balancer then assigns standby tasks and gives each task to
	// the member whose store is furthest along its changelog (balancer.go).
	// 0: no standbys, and kgo's cooperative-sticky balancer.
	StandbyReplicas int
	// StandbyTidy, when set, runs after each read of a standby task that
	// reached its changelog's end, on the standby's goroutine (never for a
	// task the loop owns): the local deletions the owner's transactions make
	// that no changelog record tells a standby (the processor's expired
	// dedup entries). An error is retried as a failed read is.
	StandbyTidy func(t state.Task, now time.Time) error
}

// Hooks let tests stop the loop at precise points of a transaction.
type Hooks struct {
	// AfterStage runs after all outputs of a transaction are produced and
	// flushed, before End. An error stops Run (a "crash").
	AfterStage func() error
	// AfterCommit runs after End reported committed, before Pebble is
	// written. An error stops Run (a crash between Kafka and Pebble).
	AfterCommit func() error
}

// Loop is the exactly-once loop, driving a Handler whose tasks' handlers
// are of type T.
type Loop[T TaskHandler] struct {
	cfg Config
	h   Handler[T]

	mu         sync.Mutex
	pending    map[state.Task]bool // newly assigned, not yet restored
	revoked    map[state.Task]bool
	pollCancel context.CancelFunc // ends the current poll early (Wake)
	woken      bool
	revokes    int // revoke and lost callbacks seen, ever
	// fetched holds the assigned partitions whose committed offsets the
	// group has fetched (with KIP-447's require_stable: after every
	// transaction of a previous owner resolved). joined: the group has
	// assigned this member its partitions (possibly none) and not lost them.
	fetched map[state.Task]bool
	// groupCommitted holds the assigned partitions the group has a
	// committed offset for that this loop has seen: fetched (≥ 0) since the
	// assignment, or committed by one of its transactions since. Only these
	// offsets are the group's; kgo's CommittedOffsets also lists
	// placeholders (see offsetsHeld).
	groupCommitted map[state.Task]bool
	joined         bool

	tasks map[state.Task]ownedTask[T] // owned by the loop goroutine
	stats *Stats
	sess  *kgo.GroupTransactSession
	// needReset: a revoke arrived since the last End (see resetSession).
	needReset bool
	// produceAborts counts consecutive transactions aborted by a produce
	// error; a record the broker will never take must not loop forever.
	produceAborts int
	// inflight is the committed transaction whose Pebble write is running
	// (AsyncCommit); settle finishes it. writers counts the goroutines
	// writing (Run waits for them).
	inflight *inflight
	writers  sync.WaitGroup
	// held: transactions abort on a HoldError (hold.go); nil otherwise.
	held *holding

	// standbyWant is this member's standby tasks as the group's last sync
	// gave them (under mu; the balancer's callback sets it, and
	// standbyChanged); sb tails them (nil: no standby replicas). The loop
	// hands sb the wanted tasks it does not own (updateStandby).
	standbyWant    map[state.Task]bool
	standbyChanged bool
	// standbySynced: the balancer delivered standby tasks since the last
	// assignment callback (kgo parses a sync's assignment before it calls
	// onAssigned).
	standbySynced bool
	sb            *standby
	// storeDone: Run has returned, or is about to, and its caller may close
	// the store; positions, which kgo calls on its own goroutine (a leave
	// abandoned after closeWait can still be joining), reads it no more.
	// storeMu is held across positions' read, so Run's end waits for one
	// in progress.
	storeMu   sync.Mutex
	storeDone bool
}

// New returns a loop; call Run once.
func New[T TaskHandler](cfg Config, h Handler[T]) *Loop[T] {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Stats == nil {
		cfg.Stats = NewStats()
	}
	return &Loop[T]{cfg: cfg, h: h, pending: map[state.Task]bool{}, revoked: map[state.Task]bool{},
		fetched: map[state.Task]bool{}, groupCommitted: map[state.Task]bool{},
		tasks: map[state.Task]ownedTask[T]{}, stats: cfg.Stats}
}

// Wake makes the loop stop waiting for records and check Handler.Due now
// (the executor calls it when a Runner queues a ledger update). Safe from any
// goroutine.
func (l *Loop[T]) Wake() {
	l.mu.Lock()
	l.woken = true
	if l.pollCancel != nil {
		l.pollCancel()
	}
	l.mu.Unlock()
}

// interruptPoll ends the poll in progress, if any (unlike Wake, not the next
// one): an idle loop then runs the hooks of a write that just landed.
func (l *Loop[T]) interruptPoll() {
	l.mu.Lock()
	if l.pollCancel != nil {
		l.pollCancel()
	}
	l.mu.Unlock()
}

// Run consumes until ctx is done or a fatal error occurs (a fencing as a
// *FencedError, which says whether a twin process did it). On ctx
// cancellation it finishes the open transaction (or aborts it), leaves the
// group and returns nil.
func (l *Loop[T]) Run(ctx context.Context) (err error) {
	started := time.Now()
	defer func() { err = l.fenced(err, started) }()
	l.publishReadiness()
	if err := l.ensureTopics(ctx); err != nil {
		return l.stopping(ctx, err)
	}
	sess, err := kgo.NewGroupTransactSession(l.sessionOpts()...)
	if err != nil {
		return fmt.Errorf("eos: session: %w", err)
	}
	defer func() {
		l.closeSession(sess, ctx.Err() != nil && err == nil)
		l.storeMu.Lock()
		l.storeDone = true
		l.storeMu.Unlock()
	}()
	l.sess = sess
	if err := l.initProducer(ctx, sess); err != nil {
		return l.stopping(ctx, err)
	}
	rc, err := l.newRestoreClient()
	if err != nil {
		return err
	}
	defer rc.Close()
	defer l.revokeAll()
	defer l.writers.Wait() // after the settle below: its goroutine has returned
	defer func() {
		// A transaction Kafka committed is written to Pebble whatever
		// made Run return.
		if serr := l.settle(); serr != nil && err == nil {
			err = serr
		}
	}()
	r := l.newRestorer(rc)
	if l.cfg.StandbyReplicas > 0 {
		stop, err := l.startStandby(ctx)
		if err != nil {
			return err
		}
		defer stop()
	}
	for {
		if ctx.Err() != nil {
			return nil
		}
		if err := l.syncAssignment(ctx, r); err != nil {
			return l.stopping(ctx, err)
		}
		if err := l.tidy(); err != nil {
			return err
		}
		fetches := l.poll(ctx, sess)
		if fetches.IsClientClosed() {
			return nil
		}
		if err := l.fetchError(fetches); err != nil {
			return l.groupDenied(err)
		}
		// Re-sync: a rebalance may have happened during the poll; the tasks
		// with records must be restored (again) before they are processed.
		if err := l.syncAssignment(ctx, r); err != nil {
			return l.stopping(ctx, err)
		}
		if err := l.verify(ctx, r, fetches); err != nil {
			return l.stopping(ctx, err)
		}
		now := l.cfg.Now()
		if fetches.NumRecords() == 0 && !l.h.Due(now) {
			continue
		}
		if err := l.transact(sess, fetches, now); err != nil {
			he, ok := asHold(err)
			if !ok {
				return err
			}
			if !l.hold(ctx, he) {
				return nil
			}
		}
	}
}

// newRestorer returns the loop's restorer reading changelogs with cl.
func (l *Loop[T]) newRestorer(cl *kgo.Client) *restorer {
	return &restorer{cfg: &l.cfg, stats: l.stats, settle: l.settle, cl: cl, restored: l.restored}
}

// AfterRestorer is a Handler that has loop-wide work after its tasks'
// Restored calls (the processor publishes its gap summaries).
type AfterRestorer interface {
	AfterRestore()
}

// restored calls Restored for each restored task – with Config.Parallel on
// up to GOMAXPROCS goroutines, one task each at a time (eachTask): rebuilding
// a task's in-memory state scans its store, seconds at millions of
// aggregates, and a takeover is not ready before every task's is done – then
// the Handler's AfterRestore, on the loop goroutine.
func (l *Loop[T]) restored(ts []*Task) error {
	if err := l.eachTask(len(ts), func(i int, _ *atomic.Bool) error { return ts[i].h.Restored() }); err != nil {
		return err
	}
	if a, ok := any(l.h).(AfterRestorer); ok && len(ts) > 0 {
		a.AfterRestore()
	}
	return nil
}

// revokeAll revokes every task still owned as Run returns, so that the
// handler's per-task state (the executor's Runners) stops with it. Each task
// leaves the owned tasks before its handler hears of it, as on any revoke.
func (l *Loop[T]) revokeAll() {
	for id, t := range l.tasks {
		delete(l.tasks, id)
		t.h.Revoked()
	}
}

// tidy is the loop's housekeeping before each poll: tasks the session
// dropped silently go, a swallowed revoke is made visible again, and a
// Pebble write that landed meanwhile gets its hooks run.
func (l *Loop[T]) tidy() error {
	if l.sb != nil {
		if err := l.sb.err(); err != nil {
			return fmt.Errorf("eos: standby replica: %w", err)
		}
	}
	l.dropLost()
	if l.needReset {
		// No records are in hand here: an empty abort cannot rewind
		// anything we are about to process.
		l.resetSession()
	}
	if f := l.inflight; f != nil {
		select {
		case <-f.done:
			// Written while we were away: run its hooks now, so that
			// counts and indexes do not wait for the next transaction.
			return l.settle()
		default:
		}
	}
	return nil
}

// pollWait bounds how long a poll waits for records before the loop checks
// Handler.Due and the assignment again.
const pollWait = 100 * time.Millisecond

// poll fetches up to MaxRecordsPerTxn records, for at most pollWait; Wake
// ends the wait early (and a Wake since the last poll skips it).
func (l *Loop[T]) poll(ctx context.Context, sess *kgo.GroupTransactSession) kgo.Fetches {
	pollCtx, cancel := context.WithTimeout(ctx, pollWait)
	l.mu.Lock()
	if l.woken {
		cancel() // work arrived since the last poll: do not wait for records
	}
	l.woken, l.pollCancel = false, cancel
	l.mu.Unlock()
	fetches := sess.PollRecords(pollCtx, l.cfg.MaxRecordsPerTxn)
	cancel()
	return fetches
}
