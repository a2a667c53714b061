package processor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/state"
	"github.com/projector-dev/projector/projection"
)

// ErrFenced reports that another instance with the same transactional id took
// over; the process must stop (invariant 5).
var ErrFenced = errors.New("processor: fenced by another instance with the same transactional id")

// Processor runs the exactly-once loop. Create it with New and call Run once.
type Processor struct {
	cfg    Config
	guards []*projection.Guard

	// assignment changes recorded by kgo's callbacks, acted on by the loop.
	mu       sync.Mutex
	assigned map[state.Task]bool // true: restored once the group fetched its offsets
	pending  map[state.Task]bool // newly assigned, not yet restored
	revoked  map[state.Task]bool

	// Owned by the loop goroutine.
	tasks map[state.Task]*task

	stats *Stats
}

// task is one owned input partition.
type task struct {
	id       state.Task
	prefix   []byte
	verified bool // restored after the group fetched committed offsets
	since    time.Time
	gaps     map[gapKey]time.Time // aggregates with held events → gap start
}

type gapKey struct{ projection, aggregate string }

// New validates cfg and returns a processor.
func New(cfg Config) (*Processor, error) {
	cfg.applyDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Processor{
		cfg:      cfg,
		assigned: make(map[state.Task]bool),
		pending:  make(map[state.Task]bool),
		revoked:  make(map[state.Task]bool),
		tasks:    make(map[state.Task]*task),
		stats:    newStats(),
	}
	for _, pr := range cfg.Projections {
		p.guards = append(p.guards, &projection.Guard{P: pr, MaxHeld: cfg.MaxHeld})
	}
	return p, nil
}

// Stats returns the processor's counters (safe to call concurrently).
func (p *Processor) Stats() *Stats { return p.stats }

// TransactionalID is the stable transactional id of this instance.
func (p *Processor) TransactionalID() string { return p.cfg.Name + "-" + p.cfg.InstanceID }

func (p *Processor) onAssigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for t, parts := range m {
		for _, part := range parts {
			id := state.Task{Topic: t, Partition: part}
			p.pending[id] = true
			delete(p.revoked, id)
		}
	}
}

func (p *Processor) onRevoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for t, parts := range m {
		for _, part := range parts {
			id := state.Task{Topic: t, Partition: part}
			p.revoked[id] = true
			delete(p.pending, id)
		}
	}
}

// Run consumes until ctx is done or a fatal error occurs. On ctx cancellation
// it finishes the open transaction (or aborts it), leaves the group and
// returns nil.
func (p *Processor) Run(ctx context.Context) error {
	log := p.cfg.Logger
	if err := p.ensureTopics(ctx); err != nil {
		return p.stopping(ctx, err)
	}
	sess, err := kgo.NewGroupTransactSession(p.sessionOpts()...)
	if err != nil {
		return fmt.Errorf("processor: session: %w", err)
	}
	defer sess.Close()
	rc, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(p.cfg.Brokers...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	}, p.cfg.ClientOpts...)...)
	if err != nil {
		return fmt.Errorf("processor: restore client: %w", err)
	}
	defer rc.Close()
	r := &restorer{p: p, cl: rc}
	log.Info("processor started", "name", p.cfg.Name, "transactionalId", p.TransactionalID(), "inputs", p.cfg.Inputs, "mode", p.cfg.Mode)

	for {
		if ctx.Err() != nil {
			log.Info("processor stopping")
			return nil
		}
		if err := p.syncAssignment(ctx, r); err != nil {
			return p.stopping(ctx, err)
		}
		pollCtx, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		fetches := sess.PollRecords(pollCtx, p.cfg.MaxRecordsPerTxn)
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
			return fmt.Errorf("processor: fetch: %w", fatal)
		}
		// Re-sync: a rebalance may have happened during the poll; the tasks
		// with records must be restored (again) before they are processed.
		if err := p.syncAssignment(ctx, r); err != nil {
			return p.stopping(ctx, err)
		}
		if err := p.verify(ctx, r, fetches); err != nil {
			return p.stopping(ctx, err)
		}
		now := p.cfg.Now()
		expiring := p.expiring(now)
		if fetches.NumRecords() == 0 && len(expiring) == 0 {
			continue
		}
		if err := p.transact(sess, fetches, expiring, now); err != nil {
			return err
		}
	}
}

// stopping turns an error caused by shutdown (a restore cut short, say) into
// a clean stop: no transaction is open at these points, so nothing is lost.
func (p *Processor) stopping(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		p.cfg.Logger.Info("processor stopping", "interrupted", err)
		return nil
	}
	return err
}

// isFatal reports client errors after which the loop must not continue.
func isFatal(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed) || errors.Is(err, kerr.GroupAuthorizationFailed) ||
		errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.SaslAuthenticationFailed)
}

func (p *Processor) sessionOpts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.SeedBrokers(p.cfg.Brokers...),
		kgo.TransactionalID(p.TransactionalID()),
		kgo.TransactionTimeout(p.cfg.TransactionTimeout),
		kgo.ConsumerGroup(p.cfg.Name),
		kgo.ConsumeTopics(p.cfg.Inputs...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.RequireStableFetchOffsets(),
		kgo.SessionTimeout(p.cfg.SessionTimeout),
		kgo.OnPartitionsAssigned(p.onAssigned),
		kgo.OnPartitionsRevoked(p.onRevoked),
		kgo.OnPartitionsLost(p.onRevoked),
		kgo.RecordPartitioner(newPartitioner(p.changelogTopics())),
		kgo.ProducerLinger(0),
	}
	return append(opts, p.cfg.ClientOpts...)
}

func (p *Processor) changelogTopics() []string {
	var ts []string
	for _, in := range p.cfg.Inputs {
		ts = append(ts, ChangelogTopic(p.cfg.Name, in))
	}
	return ts
}

// partitioner sends changelog records to the partition the processor chose
// (the input partition they belong to) and hashes everything else by key like
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
