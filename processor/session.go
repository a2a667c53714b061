package processor

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

// Defaults of Config's zero values. The application's configuration
// (kafka.*, gaps.*) defaults to the same values.
const (
	// DefaultPartitions (4) is the partition count of the topics the
	// processor creates when missing.
	DefaultPartitions = eos.DefaultPartitions
	// DefaultMaxRecordsPerTxn bounds one transaction's input records.
	DefaultMaxRecordsPerTxn = 5000
	// DefaultHoldTimeout is how long a gap stays open before GapPolicy
	// decides.
	DefaultHoldTimeout = 5 * time.Minute
	// DefaultMaxHeld bounds one aggregate's held events.
	DefaultMaxHeld = 10000
	// DefaultTransactionTimeout (40s) and DefaultSessionTimeout (45s) are
	// the Kafka transaction and group session timeouts.
	DefaultTransactionTimeout = eos.DefaultTransactionTimeout
	DefaultSessionTimeout     = eos.DefaultSessionTimeout
)

// Session is who the processor is in Kafka and the bounds of its
// transactions: the part of Config that the side-effect executor's
// configuration (sideeffects.Session) has too, field for field, so that
// one converts to the other.
type Session struct {
	// Name is the worker's name (required): the consumer group and
	// transactional-id prefix (unless Config.Group overrides them) and the
	// dedup scope; the default topic names derive from it.
	Name string
	// InstanceID is stable per instance (required): the transactional id
	// is <group>-<InstanceID>, and the group membership is static under it
	// (docs/decisions/006), so a restarted instance takes its
	// predecessor's place at once. Two live instances must not share it:
	// the second fences the first (docs/design.md#fencing-is-fatal).
	InstanceID string
	// Brokers are the seed brokers (required).
	Brokers []string
	// ClientOpts are extra franz-go options (TLS, SASL, logging) for every
	// client the processor makes; they come last, so they can override.
	ClientOpts []kgo.Opt
	// DeadLetterTopic receives the records the processor cannot apply,
	// each with its reason; default <Name>.dlq.
	DeadLetterTopic string
	// Partitions is the partition count of the topics the processor
	// creates when missing (changelogs always follow their input); default
	// DefaultPartitions.
	Partitions int32
	// MaxRecordsPerTxn bounds the input records of one transaction;
	// default DefaultMaxRecordsPerTxn.
	MaxRecordsPerTxn int
	// MaxRecordBytes is the largest input record accepted and record
	// produced (kafka.maxRecordBytes); an event whose outputs would exceed
	// it is dead-lettered too-large. The producer's batch limit and the
	// created topics' max.message.bytes are raised above it. Default
	// 1 MiB.
	MaxRecordBytes int
	// TransactionTimeout is the Kafka transaction timeout; default
	// DefaultTransactionTimeout.
	TransactionTimeout time.Duration
	// SessionTimeout is the consumer group session timeout; default
	// DefaultSessionTimeout.
	SessionTimeout time.Duration
	// Logger receives the processor's logs; default: discarded.
	Logger *slog.Logger
	// TracerProvider, when set, makes the processor's transaction spans (OpenTelemetry;
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

// Store is the processor's local state: one Pebble database holding every
// owned partition's aggregates, held events and dedup marks, a cache of the
// changelog topics that is never ahead of Kafka
// (docs/design.md#behind-kafka). Open it with OpenStore and Close it after
// Run returns; or set Config.StateDir and let the processor do both. It is
// opaque: only the processor reads and writes it.
type Store struct{ st *state.Store }

// OpenStore opens (or creates) a processor's store in dir, with a block
// cache of cacheBytes (0: the store's default).
func OpenStore(dir string, cacheBytes int64) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("processor: state dir %s: %w", dir, err)
	}
	st, err := state.Open(dir, storeOptions(cacheBytes))
	if err != nil {
		return nil, err
	}
	return &Store{st: st}, nil
}

// Close closes the store. Call it once, after Run returned.
func (s *Store) Close() error {
	if s == nil || s.st == nil {
		return errors.New("processor: Close of a store that is not open")
	}
	err := s.st.Close()
	s.st = nil
	return err
}

func init() {
	seam.Processor = func(cfg any, s seam.Seams) { cfg.(*Config).seams = s }
	seam.ProcessorStoreOptions = storeOptions
}
