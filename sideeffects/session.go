package sideeffects

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/seam"
	"github.com/projector-dev/projector/internal/core/state"
)

// Defaults of WorkerConfig's zero values.
const (
	// DefaultPartitions (4) is the partition count of the effects topic
	// when the executor creates it.
	DefaultPartitions = eos.DefaultPartitions
	// DefaultMaxRecordsPerTxn bounds one transaction's input records.
	DefaultMaxRecordsPerTxn = 1000
	// DefaultTransactionTimeout (40s) and DefaultSessionTimeout (45s) are
	// the Kafka transaction and group session timeouts.
	DefaultTransactionTimeout = eos.DefaultTransactionTimeout
	DefaultSessionTimeout     = eos.DefaultSessionTimeout
)

// Session is who the executor is in Kafka and the bounds of its
// transactions. It has the fields of processor.Session, field for field, so
// that one converts to the other: a processor and its executor share them.
type Session struct {
	// Name is the worker's name (required): the executor's consumer group
	// and transactional-id prefix are <Name>-executor; the default topic
	// names derive from it.
	Name string
	// InstanceID is stable per instance (required): the transactional id
	// is <Name>-executor-<InstanceID>, and the group membership is static
	// under it (docs/decisions/006). Two live instances must not share it.
	InstanceID string
	// Brokers are the seed brokers (required).
	Brokers []string
	// ClientOpts are extra franz-go options (TLS, SASL, logging) for every
	// client the executor makes; they come last, so they can override.
	ClientOpts []kgo.Opt
	// DeadLetterTopic receives the intent records the executor cannot
	// read, each with its reason; default <Name>.dlq.
	DeadLetterTopic string
	// Partitions is the partition count of the effects topic when the
	// executor creates it; default DefaultPartitions.
	Partitions int32
	// MaxRecordsPerTxn bounds the input records of one transaction;
	// default DefaultMaxRecordsPerTxn.
	MaxRecordsPerTxn int
	// MaxRecordBytes is kafka.maxRecordBytes: the producer's batch limit
	// and the created topics' max.message.bytes are raised above it (0:
	// the client's and broker's defaults).
	MaxRecordBytes int
	// TransactionTimeout is the Kafka transaction timeout; default
	// DefaultTransactionTimeout.
	TransactionTimeout time.Duration
	// SessionTimeout is the consumer group session timeout; default
	// DefaultSessionTimeout.
	SessionTimeout time.Duration
	// Logger receives the executor's logs; default: discarded.
	Logger *slog.Logger
	// TracerProvider, when set, makes the executor's webhook call spans (OpenTelemetry;
	// docs/contract.md#trace-context); nil: no spans, and no cost.
	TracerProvider trace.TracerProvider
}

// eos is the session as the transaction loop takes it, with the store and
// the seams (hooks, clock) only the repository's own code sets.
func (s *Session) eos(st *state.Store, sm seam.Seams) eos.Session {
	return eos.Session{
		Name: s.Name, InstanceID: s.InstanceID, Brokers: s.Brokers, ClientOpts: s.ClientOpts,
		DeadLetterTopic: s.DeadLetterTopic, Partitions: s.Partitions, Store: st,
		MaxRecordsPerTxn: s.MaxRecordsPerTxn, MaxRecordBytes: s.MaxRecordBytes,
		TransactionTimeout: s.TransactionTimeout, SessionTimeout: s.SessionTimeout,
		Logger: s.Logger, Now: sm.Now, Hooks: sm.Hooks,
	}
}

// StateStore is the executor's local state: the Pebble database of the
// owned partitions' ledgers, a cache of the ledger's changelog that is
// never ahead of Kafka (docs/design.md#behind-kafka). Open it with
// OpenStateStore and Close it after Run returns; or set
// WorkerConfig.StateDir and let the worker do both. It is opaque: only the
// worker reads and writes it.
type StateStore struct{ st *state.Store }

// OpenStateStore opens (or creates) an executor's store in dir, with a
// block cache of cacheBytes (0: the store's default).
func OpenStateStore(dir string, cacheBytes int64) (*StateStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("sideeffects: state dir %s: %w", dir, err)
	}
	st, err := state.Open(dir, state.Options{CacheBytes: cacheBytes})
	if err != nil {
		return nil, err
	}
	return &StateStore{st: st}, nil
}

// Close closes the store. Call it once, after Run returned.
func (s *StateStore) Close() error {
	if s == nil || s.st == nil {
		return errors.New("sideeffects: Close of a store that is not open")
	}
	err := s.st.Close()
	s.st = nil
	return err
}

func init() {
	seam.Executor = func(cfg any, s seam.Seams) { cfg.(*WorkerConfig).seams = s }
}
