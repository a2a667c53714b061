package eos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/state"
)

// ErrFenced reports that another instance with the same transactional id took
// over; the process must stop (docs/design.md#fencing-is-fatal). The broker
// says so as the producer's fencing (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH)
// or, as the instance id is also the group's static member id (decision 006),
// as the group's (FENCED_INSTANCE_ID): whichever request of the old
// incarnation reaches the broker first after the new one started.
var ErrFenced = errors.New("fenced by another instance with the same transactional id")

// Dead-letter headers (docs/contract.md#dead-letter-topic).
const (
	HeaderReason = "projector-reason"
	HeaderError  = "projector-error"
	HeaderSource = "projector-source"
)

// Handler gives meaning to records. All methods run on the loop goroutine.
type Handler interface {
	// Restored is called after a task's state was restored (again), with no
	// transaction open: rebuild in-memory indexes from the store here.
	Restored(t *Task) error
	// Revoked is called when a task is no longer owned.
	Revoked(t *Task)
	// Due reports whether the handler has work to do in a transaction even
	// without records (expired gaps, ledger updates).
	Due(now time.Time) bool
	// Begin runs first in every transaction, for that work.
	Begin(b *Batch) error
	// Process handles one record of an owned, restored task.
	Process(b *Batch, t *Task, r *kgo.Record) error
}

// Stager is an optional Handler extension. Stage runs once per task batch
// of a transaction, after its records were processed and on the goroutine
// that processed them (the loop's, for a batch without records), before the
// batch's changelog records are produced:
// the handler puts what it collected over the batch into b.Txn there (the
// processor's dedup segment).
type Stager interface {
	Stage(b *Batch)
}

// Task is one owned input partition.
type Task struct {
	ID     state.Task
	Prefix []byte
	// Data is the handler's per-task state.
	Data any
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
	// InstanceID, when set, makes this instance a static member of the
	// group (KIP-345, group.instance.id): a restarted incarnation takes its
	// predecessor's place and assignment at once instead of waiting for the
	// dead member's session to expire (docs/decisions/006).
	InstanceID string
	Brokers    []string
	ClientOpts []kgo.Opt
	Inputs     []string
	// ChangelogOf names the changelog topic of an input topic.
	ChangelogOf     func(input string) string
	DeadLetterTopic string
	// Topics the loop creates when missing (changelogs are added).
	OutputTopics []TopicSpec
	Partitions   int32 // for missing topics
	// CreateInputs creates missing input topics with Partitions partitions
	// (the embedded broker). Off, a missing input is waited for, reported
	// in the log and by Stats.Readiness, never created: on a real cluster
	// an input's partition count is the operator's decision.
	CreateInputs bool

	// StartOffset is where a group with no committed offset starts
	// (default: the earliest offset).
	StartOffset *kgo.Offset

	Store            *state.Store
	MaxRecordsPerTxn int
	// MaxRecordBytes is the largest record (key and value) the handler
	// produces (kafka.maxRecordBytes; 0: the client's and broker's
	// defaults). The producer's batch limit and the created topics'
	// max.message.bytes are raised above it (MaxBatchBytes), so that the
	// client never rejects a record the handler decided to write.
	MaxRecordBytes     int
	TransactionTimeout time.Duration
	SessionTimeout     time.Duration
	// Restore turns one changelog record (value nil: a tombstone) into the
	// Pebble writes it stands for, calling emit for each (value nil: a
	// deletion; emit keeps both slices). Nil restores every record as it
	// is. The processor drops expired dedup entries here and expands each
	// dedup segment into its entries (state.Txn.SetLogged). An error (a
	// corrupt record) fails the restore.
	Restore func(changelogKey, value []byte, now time.Time, emit func(key, value []byte)) error
	Logger  *slog.Logger
	Now     func() time.Time
	Hooks   *Hooks
	Stats   *Stats
	// Parallel lets Process run concurrently for different tasks (one
	// goroutine per task at a time, up to GOMAXPROCS): the handler must
	// keep no state shared between tasks outside its Batch.
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

// Loop is the exactly-once loop.
type Loop struct {
	cfg Config
	h   Handler

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
	joined  bool

	tasks map[state.Task]*Task // owned by the loop goroutine
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
}

// maxProduceAborts is how many transactions in a row may abort on produce
// errors before Run gives up with the error.
const maxProduceAborts = 5

// New returns a loop; call Run once.
func New(cfg Config, h Handler) *Loop {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Stats == nil {
		cfg.Stats = NewStats()
	}
	return &Loop{cfg: cfg, h: h, pending: map[state.Task]bool{}, revoked: map[state.Task]bool{},
		fetched: map[state.Task]bool{}, tasks: map[state.Task]*Task{}, stats: cfg.Stats}
}

// Wake makes the loop stop waiting for records and check Handler.Due now
// (the executor calls it when a Runner queues a ledger update). Safe from any
// goroutine.
func (l *Loop) Wake() {
	l.mu.Lock()
	l.woken = true
	if l.pollCancel != nil {
		l.pollCancel()
	}
	l.mu.Unlock()
}

// interruptPoll ends the poll in progress, if any (unlike Wake, not the next
// one): an idle loop then runs the hooks of a write that just landed.
func (l *Loop) interruptPoll() {
	l.mu.Lock()
	if l.pollCancel != nil {
		l.pollCancel()
	}
	l.mu.Unlock()
}

// Tasks calls fn for every owned, verified task. Ownership is confirmed
// against the client's own offsets as well as the callbacks: franz-go's
// transact session forwards only the first revoke until the next End, so a
// task the callbacks still list may already be gone (the client deletes
// revoked and lost partitions from its offsets).
func (l *Loop) Tasks(fn func(*Task)) {
	held := l.offsetsHeld()
	for id, t := range l.tasks {
		if t.verified && held(id) {
			fn(t)
		}
	}
}

// offsetsHeld returns whether the client holds committed or uncommitted
// offsets for a partition (a snapshot taken now).
func (l *Loop) offsetsHeld() func(state.Task) bool {
	var owned, committed map[string]map[int32]kgo.EpochOffset
	if l.sess != nil {
		owned, committed = l.sess.Client().UncommittedOffsets(), l.sess.Client().CommittedOffsets()
	}
	return func(id state.Task) bool {
		_, a := owned[id.Topic][id.Partition]
		_, b := committed[id.Topic][id.Partition]
		return a || b
	}
}

// dropLost revokes the tasks whose partitions the client no longer holds
// offsets for although it did since their assignment: a revoke or loss the
// transact session swallowed (it forwards one per End). Their handler state
// must go now – the executor's Runner above all – not at the next callback.
func (l *Loop) dropLost() {
	if len(l.tasks) == 0 {
		return
	}
	held := l.offsetsHeld()
	for id, t := range l.tasks {
		switch {
		case held(id):
			t.inOffsets = true
		case t.inOffsets:
			l.cfg.Logger.Info("partition no longer held by the client; dropping it", "task", id.String())
			delete(l.tasks, id)
			l.h.Revoked(t)
			l.stats.setAssigned(id, false)
			l.mu.Lock()
			delete(l.fetched, id)
			l.mu.Unlock()
			l.needReset = true
		}
	}
}

// resetSession ends an empty transaction so that the session clears its
// revoked flag and forwards the next revoke to our callback (see Tasks).
func (l *Loop) resetSession() {
	if l.sess == nil {
		return
	}
	if err := l.sess.Begin(); err != nil {
		l.cfg.Logger.Debug("reset session: begin", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.TransactionTimeout)
	defer cancel()
	if _, err := l.sess.End(ctx, kgo.TryAbort); err != nil {
		l.cfg.Logger.Debug("reset session: end", "err", err)
		return
	}
	l.needReset = false
}

func (l *Loop) onAssigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	// kgo calls this after every completed join, also when nothing new is
	// assigned: the member is in the group (readiness with no partitions).
	l.joined = true
	for t, parts := range m {
		for _, part := range parts {
			id := state.Task{Topic: t, Partition: part}
			l.pending[id] = true
			delete(l.revoked, id)
		}
	}
}

func (l *Loop) onRevoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.revokes++
	for t, parts := range m {
		for _, part := range parts {
			id := state.Task{Topic: t, Partition: part}
			l.revoked[id] = true
			delete(l.pending, id)
			delete(l.fetched, id)
		}
	}
}

// onLost is onRevoked for a member the group dropped (session expired,
// fenced): it must join again before it is ready.
func (l *Loop) onLost(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	l.onRevoked(ctx, cl, m)
	l.mu.Lock()
	l.joined = false
	l.mu.Unlock()
}

// onOffsetsFetched records the partitions whose committed offsets the group
// fetched after an assignment. kgo fetches with require_stable (KIP-447):
// the broker answers only once no transaction holds pending offsets for
// them, and every transaction that changes a task's state commits an offset
// for its partition (fence), so by now any previous owner's transaction
// has resolved and the changelog's last stable offset includes it.
func (l *Loop) onOffsetsFetched(_ context.Context, _ *kgo.Client, resp *kmsg.OffsetFetchResponse) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	add := func(topic string, part int32, code int16) {
		if code == 0 {
			l.fetched[state.Task{Topic: topic, Partition: part}] = true
		}
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			add(t.Topic, p.Partition, p.ErrorCode)
		}
	}
	for _, g := range resp.Groups {
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				add(t.Topic, p.Partition, p.ErrorCode)
			}
		}
	}
	return nil
}

// Run consumes until ctx is done or a fatal error occurs. On ctx
// cancellation it finishes the open transaction (or aborts it), leaves the
// group and returns nil.
func (l *Loop) Run(ctx context.Context) (err error) {
	log := l.cfg.Logger
	l.publishReadiness()
	if err := l.ensureTopics(ctx); err != nil {
		return l.stopping(ctx, err)
	}
	sess, err := kgo.NewGroupTransactSession(l.sessionOpts()...)
	if err != nil {
		return fmt.Errorf("eos: session: %w", err)
	}
	defer func() { l.closeSession(sess, ctx.Err() != nil && err == nil) }()
	l.sess = sess
	// Initialise the transactional producer before anything else: this
	// fences a previous incarnation with our transactional id and aborts the
	// transaction it left open, so restores do not wait behind it (and an
	// authentication problem surfaces now, with its cause).
	initCtx, cancelInit := context.WithTimeout(ctx, l.cfg.TransactionTimeout+l.cfg.SessionTimeout)
	_, _, err = sess.Client().ProducerID(initCtx)
	cancelInit()
	if err != nil {
		return l.stopping(ctx, fmt.Errorf("eos: initialise transactional id %s: %w", l.cfg.TransactionalID, err))
	}
	rc, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(l.cfg.Brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	}, l.cfg.ClientOpts...)...)
	if err != nil {
		return fmt.Errorf("eos: restore client: %w", err)
	}
	defer rc.Close()
	defer func() {
		for _, t := range l.tasks {
			l.h.Revoked(t)
		}
	}()
	defer l.writers.Wait() // after the settle below: its goroutine has returned
	defer func() {
		// A transaction Kafka committed is written to Pebble whatever
		// made Run return.
		if serr := l.settle(); serr != nil && err == nil {
			err = serr
		}
	}()
	r := &restorer{l: l, cl: rc}
	for {
		if ctx.Err() != nil {
			return nil
		}
		if err := l.syncAssignment(ctx, r); err != nil {
			return l.stopping(ctx, err)
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
				if err := l.settle(); err != nil {
					return err
				}
			default:
			}
		}
		pollCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		l.mu.Lock()
		if l.woken {
			cancel() // work arrived since the last poll: do not wait for records
		}
		l.woken, l.pollCancel = false, cancel
		l.mu.Unlock()
		fetches := sess.PollRecords(pollCtx, l.cfg.MaxRecordsPerTxn)
		cancel()
		if fetches.IsClientClosed() {
			return nil
		}
		var fatal error
		fetches.EachError(func(t string, part int32, err error) {
			if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
				return
			}
			log.Warn("fetch error", "topic", t, "partition", part, "err", err)
			if isFatal(err) {
				fatal = err
			}
		})
		if fatal != nil {
			return fatalError("fetch", fatal)
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
			return err
		}
	}
}

// closeWait bounds how long leaving the group may take at shutdown.
const closeWait = 10 * time.Second

// closeSession leaves the group and closes the client, but gives up after
// closeWait: a leave waits for a join in progress, and a join waits (up to
// the rebalance timeout) for members that died without leaving. No
// transaction is open here, so abandoning the leave loses nothing; the broker
// drops the member when its session times out.
//
// A static member (Config.InstanceID) is not removed by kgo's Close: the
// group keeps its partitions for the session timeout, waiting for a restart.
// On a clean stop (leave) we remove it ourselves, so that the others take
// its partitions at once; after a crash or a fatal error we do not: a
// restarted incarnation takes the place back without a rebalance, and a
// fenced one must not remove the member that fenced it.
func (l *Loop) closeSession(sess *kgo.GroupTransactSession, leave bool) {
	member, _ := sess.Client().GroupMetadata()
	done := make(chan struct{})
	go func() {
		sess.Close()
		if leave && l.cfg.InstanceID != "" && member != "" {
			l.leaveStatic(member)
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(closeWait):
		l.cfg.Logger.Warn("leaving the consumer group is taking long (a rebalance waits for dead members); not waiting", "after", closeWait)
	}
}

// leaveStatic removes this static member from the group, if the group still
// lists our instance id with our member id (not a successor's).
func (l *Loop) leaveStatic(member string) {
	ctx, cancel := context.WithTimeout(context.Background(), closeWait)
	defer cancel()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(l.cfg.Brokers...)}, l.cfg.ClientOpts...)...)
	if err != nil {
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	groups, err := adm.DescribeGroups(ctx, l.cfg.Group)
	if err != nil {
		l.cfg.Logger.Debug("leave: describe group", "err", err)
		return
	}
	ours := false
	for _, m := range groups[l.cfg.Group].Members {
		if m.InstanceID != nil && *m.InstanceID == l.cfg.InstanceID && m.MemberID == member {
			ours = true
		}
	}
	if !ours {
		return // already gone (kgo left for us), or a successor holds the id
	}
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = l.cfg.Group
	lm := kmsg.NewLeaveGroupRequestMember()
	lm.MemberID, lm.InstanceID = member, &l.cfg.InstanceID
	lm.Reason = kmsg.StringPtr("projector stopping")
	req.Members = append(req.Members, lm)
	if _, err := req.RequestWith(ctx, cl); err != nil {
		l.cfg.Logger.Debug("leave: leave group", "err", err)
		return
	}
	l.cfg.Logger.Info("left the consumer group", "group", l.cfg.Group, "instanceId", l.cfg.InstanceID)
}

// stopping turns an error caused by shutdown (a restore cut short, say) into
// a clean stop: no transaction is open at these points, so nothing is lost.
func (l *Loop) stopping(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, errStateCommit) {
		l.cfg.Logger.Info("stopping", "interrupted", err)
		return nil
	}
	return err
}

// isFatal reports client errors after which the loop must not continue.
func isFatal(err error) bool {
	return isFenced(err) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed) || errors.Is(err, kerr.GroupAuthorizationFailed) ||
		errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.SaslAuthenticationFailed)
}

// isFenced reports the broker's ways of saying a newer incarnation took
// over (ErrFenced).
func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.FencedInstanceID)
}

// fatalError wraps a fatal client error: ErrFenced when it is a fencing,
// else with what failed (an authorization error is not a fencing).
func fatalError(what string, err error) error {
	if isFenced(err) {
		return fmt.Errorf("%w: %v", ErrFenced, err)
	}
	return fmt.Errorf("eos: %s: %w", what, err)
}

func (l *Loop) sessionOpts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(l.cfg.Brokers...),
		kgo.TransactionalID(l.cfg.TransactionalID),
		kgo.TransactionTimeout(l.cfg.TransactionTimeout),
		kgo.ConsumerGroup(l.cfg.Group),
		kgo.ConsumeTopics(l.cfg.Inputs...),
		// KIP-447 stable offset fetches are always on in franz-go ≥ 1.22
		// (RequireStableFetchOffsets is a no-op): a new owner's offset fetch
		// waits for a previous owner's pending transaction.
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.SessionTimeout(l.cfg.SessionTimeout),
		// A rebalance waits this long for members to rejoin; ours rejoin
		// between transactions, which never outlast the transaction
		// timeout. Shorter than kgo's 60 s default, so that a killed member
		// stalls a rebalance less.
		kgo.RebalanceTimeout(max(l.cfg.TransactionTimeout+5*time.Second, l.cfg.SessionTimeout)),
		kgo.OnPartitionsAssigned(l.onAssigned),
		kgo.OnPartitionsRevoked(l.onRevoked),
		kgo.OnPartitionsLost(l.onLost),
		kgo.OnOffsetsFetched(l.onOffsetsFetched),
		kgo.RecordPartitioner(newPartitioner(l.changelogTopics())),
	}
	if l.cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(l.cfg.InstanceID))
	}
	opts = append(opts, ClientTuning()...)
	if l.cfg.MaxRecordBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(int32(MaxBatchBytes(l.cfg.MaxRecordBytes))))
	}
	if l.cfg.StartOffset != nil {
		opts = append(opts, kgo.ConsumeResetOffset(*l.cfg.StartOffset))
	}
	return append(opts, l.cfg.ClientOpts...)
}

func (l *Loop) changelogTopics() []string {
	var ts []string
	for _, in := range l.cfg.Inputs {
		ts = append(ts, l.cfg.ChangelogOf(in))
	}
	return ts
}

// ClientTuning are the throughput settings of the loop's client (the bench's
// transport floor uses them too, so that the two compare like for like):
//
//   - no linger: a transaction flushes its records at the end anyway;
//   - a smaller per-partition fetch size than kgo's 1 MiB, so that one poll
//     carries records of several partitions, which the handler can then
//     process in parallel (Config.Parallel);
//   - room to buffer a whole transaction's output (about two records per
//     input record: projection and aggregate; dedup marks go in one
//     segment per transaction) without blocking.
func ClientTuning() []kgo.Opt {
	return []kgo.Opt{
		kgo.ProducerLinger(0),
		kgo.FetchMaxPartitionBytes(256 << 10),
		kgo.MaxBufferedRecords(64 << 10),
	}
}

// partitioner sends changelog records to the partition the loop chose (the
// input partition they belong to) and hashes everything else by key like
// Kafka's default partitioner.
type partitioner struct {
	manual map[string]bool
	byKey  kgo.Partitioner
}

func newPartitioner(manualTopics []string) kgo.Partitioner {
	m := make(map[string]bool, len(manualTopics))
	for _, t := range manualTopics {
		m[t] = true
	}
	return partitioner{manual: m, byKey: kgo.StickyKeyPartitioner(nil)}
}

func (p partitioner) ForTopic(t string) kgo.TopicPartitioner {
	if p.manual[t] {
		return kgo.ManualPartitioner().ForTopic(t)
	}
	return p.byKey.ForTopic(t)
}

// Batch is one transaction's work for one task – its staged state, the
// records it produces and what to do once the transaction commits – or, for
// the batch Handler.Begin receives, the transaction as a whole (Txn nil;
// For gives a task's batch). Each task's state is committed to Pebble in its
// own batch with its own changelog offset (state.Store.WriteAll).
//
// Records are handed to the producer as soon as they are added, so the
// broker works while the handler is still processing.
type Batch struct {
	// Txn stages this task's state; nil on the transaction's top batch.
	Txn *state.Txn
	Now time.Time
	// Data belongs to the handler (per-batch scratch, such as a tally).
	Data any

	task    *Task
	tx      *txnBatches
	commit  []func()
	last    []func()
	onAbort []func()
}

// txnBatches is what the batches of one transaction share.
type txnBatches struct {
	store    *state.Store
	dlq      string
	produce  func(*kgo.Record)
	top      *Batch
	children []*Batch // in creation order
	byTask   map[state.Task]*Batch
	// bases are the previous transaction's task batches while their Pebble
	// write is in flight (AsyncCommit): task txns read through theirs.
	bases map[state.Task]*Batch
	// owned are the tasks owned and verified when the transaction began
	// (Loop.Tasks); only they may be changed outside Process.
	owned map[*Task]bool
}

func newTxnBatches(store *state.Store, now time.Time, dlq string, produce func(*kgo.Record), bases map[state.Task]*Batch) *Batch {
	tx := &txnBatches{store: store, dlq: dlq, produce: produce, byTask: map[state.Task]*Batch{}, bases: bases}
	tx.top = &Batch{Now: now, tx: tx}
	return tx.top
}

// For returns task t's batch in this transaction, creating it on first use.
// It must not be called while tasks are processed concurrently (it is meant
// for Handler.Begin); a task's own batch is what Process receives.
func (b *Batch) For(t *Task) *Batch {
	if b.task == t {
		return b
	}
	tx := b.tx
	if c, ok := tx.byTask[t.ID]; ok {
		return c
	}
	var base *state.Txn
	if p := tx.bases[t.ID]; p != nil {
		base = p.Txn
	}
	c := &Batch{Txn: tx.store.NewTxnSized(base, t.stagedHint), Now: tx.top.Now, task: t, tx: tx}
	tx.byTask[t.ID] = c
	tx.children = append(tx.children, c)
	return c
}

// Task is the batch's task; nil on the transaction's top batch.
func (b *Batch) Task() *Task { return b.task }

// Owns reports whether t was owned and verified when the transaction began:
// a handler's Begin may change only such tasks (For); the transaction aborts
// if it changes another (see Loop.end).
func (b *Batch) Owns(t *Task) bool { return b.tx.owned[t] }

// OnCommit registers fn to run after the transaction committed and Pebble was
// written (never after an abort).
func (b *Batch) OnCommit(fn func()) { b.commit = append(b.commit, fn) }

// OnCommitted registers fn to run once the transaction committed, after every
// OnCommit hook (summaries that must see all of the transaction's updates).
func (b *Batch) OnCommitted(fn func()) { b.last = append(b.last, fn) }

// OnAbort registers fn to run if the transaction does not commit (aborted,
// failed, or the loop stopped with it open).
func (b *Batch) OnAbort(fn func()) { b.onAbort = append(b.onAbort, fn) }

// all is the top batch and every task batch, top last.
func (tx *txnBatches) all() []*Batch { return append(slices.Clone(tx.children), tx.top) }

func (tx *txnBatches) aborted() {
	for _, b := range tx.all() {
		for _, fn := range b.onAbort {
			fn()
		}
		b.onAbort = nil
	}
}

// committed runs the commit hooks, then the committed hooks.
func (tx *txnBatches) committed() {
	all := tx.all()
	for _, b := range all {
		for _, fn := range b.commit {
			fn()
		}
	}
	for _, b := range all {
		for _, fn := range b.last {
			fn()
		}
	}
}

// Produce adds a record to the transaction.
func (b *Batch) Produce(r *kgo.Record) { b.tx.produce(r) }

// MaxDeadLetterBytes bounds the original key and value copied into a dead
// letter: a record the broker accepted on the input may exceed what it (or the
// producer) accepts on the dead-letter topic, and a dead letter that cannot be
// produced would jam its partition. Larger originals are truncated, and the
// header projector-original-bytes gives their size; projector-source still
// locates the whole record.
const MaxDeadLetterBytes = 512 << 10

// MaxBatchBytes is the producer batch limit (and created topics'
// max.message.bytes) for records of at most maxRecord bytes: room for the
// record, its headers (bounded by MaxHeaderBytes), a dead letter's
// truncated original (MaxDeadLetterBytes) and the batch overhead.
func MaxBatchBytes(maxRecord int) int {
	return max(maxRecord, MaxDeadLetterBytes) + 16<<10
}

// MaxHeaderBytes bounds every header value the worker writes: a longer one
// is cut to this size, ending in TruncatedMark.
const MaxHeaderBytes = 1 << 10

// TruncatedMark ends a header value cut to MaxHeaderBytes.
const TruncatedMark = "…[truncated]"

// HeaderValue is s as a header value, bounded to MaxHeaderBytes.
func HeaderValue(s string) []byte {
	if len(s) <= MaxHeaderBytes {
		return []byte(s)
	}
	return append(Truncate([]byte(s), MaxHeaderBytes-len(TruncatedMark)), TruncatedMark...)
}

// Truncate returns b cut to at most n bytes (a copy when cut), not splitting
// a UTF-8 sequence.
func Truncate(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	for n > 0 && n < len(b) && b[n]&0xC0 == 0x80 {
		n--
	}
	return append([]byte(nil), b[:n]...)
}

// HeaderOriginalBytes is set on a dead letter whose original was truncated.
const HeaderOriginalBytes = "projector-original-bytes"

// DeadLetter produces the original record to the dead-letter topic with the
// reason headers.
func (b *Batch) DeadLetter(id state.Task, offset int64, key, value []byte, reason, msg string) {
	r := &kgo.Record{
		Topic: b.tx.dlq,
		Key:   key,
		Value: value,
		Headers: []kgo.RecordHeader{
			{Key: HeaderReason, Value: HeaderValue(reason)},
			{Key: HeaderError, Value: HeaderValue(msg)},
			{Key: HeaderSource, Value: HeaderValue(id.Topic + "/" + strconv.Itoa(int(id.Partition)) + "/" + strconv.FormatInt(offset, 10))},
		},
	}
	if len(key)+len(value) > MaxDeadLetterBytes {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderOriginalBytes,
			Value: []byte(strconv.Itoa(len(key)) + "/" + strconv.Itoa(len(value)))})
		if len(key) > MaxDeadLetterBytes/4 {
			r.Key = key[:MaxDeadLetterBytes/4]
		}
		if len(value) > MaxDeadLetterBytes-len(r.Key) {
			r.Value = value[:MaxDeadLetterBytes-len(r.Key)]
		}
	}
	b.tx.produce(r)
}

// NewTaskBatch returns a standalone transaction holding task t's batch,
// outside any loop: for benchmarks and tools that drive a handler directly.
// Records, changelog records included, go to produce; Commit stages and
// writes the batch as the loop does.
func NewTaskBatch(st *state.Store, t *Task, now time.Time, produce func(*kgo.Record)) *Batch {
	return newTxnBatches(st, now, "", produce, nil).For(t)
}

// Commit ends a standalone batch (NewTaskBatch) as the loop ends a task's
// batch – h's Stage, the changelog records to changelog – then writes its
// state to Pebble and runs its commit hooks.
func (b *Batch) Commit(h Handler, changelog string) error {
	if err := stageChangelog(h, changelog, b); err != nil {
		return err
	}
	if err := b.Txn.Commit(); err != nil {
		return err
	}
	b.tx.committed()
	return nil
}
