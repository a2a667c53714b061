package eos

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/core/acl"
)

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
func (l *Loop[T]) closeSession(sess *kgo.GroupTransactSession, leave bool) {
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
func (l *Loop[T]) leaveStatic(member string) {
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

// sessionOpts are the transact session's client options: the transactional
// producer and the consumer group with the loop's callbacks, read_committed,
// the partitioner, then Config.ClientOpts last so that they can override.
func (l *Loop[T]) sessionOpts() []kgo.Opt {
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
	if l.cfg.StandbyReplicas > 0 {
		// Listed second, cooperative-sticky keeps a group of members of an
		// older version (and a rolling upgrade) balanced: the group uses
		// the first protocol every member names.
		opts = append(opts, kgo.Balancers(
			newStandbyBalancer(l.cfg.StandbyReplicas, l.positions, l.onStandby, func(err error) {
				l.cfg.Logger.Warn("standby replicas: a member's join metadata has unreadable positions", "err", err)
			}),
			kgo.CooperativeStickyBalancer()))
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

// changelogTopics are the changelog topics of the inputs, whose records the
// partitioner places by hand.
func (l *Loop[T]) changelogTopics() []string {
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

// initProducer initialises the transactional producer before anything else:
// this fences a previous incarnation with our transactional id and aborts
// the transaction it left open, so restores do not wait behind it (and an
// authentication problem surfaces now, with its cause).
func (l *Loop[T]) initProducer(ctx context.Context, sess *kgo.GroupTransactSession) error {
	initCtx, cancel := context.WithTimeout(ctx, l.cfg.TransactionTimeout+l.cfg.SessionTimeout)
	defer cancel()
	if _, _, err := sess.Client().ProducerID(initCtx); err != nil {
		return fmt.Errorf("eos: initialise transactional id %s: %w", l.cfg.TransactionalID,
			acl.Denied(err, acl.TransactionalID(l.cfg.TransactionalID, "run its transactions")))
	}
	return nil
}

// newRestoreClient returns the client restores read the changelogs with:
// read_committed, keeping the control records (every transaction's marker
// shows a restore that the range up to the last stable offset was read).
func (l *Loop[T]) newRestoreClient() (*kgo.Client, error) {
	rc, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(l.cfg.Brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	}, l.cfg.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("eos: restore client: %w", err)
	}
	return rc, nil
}
