package eos

import (
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/state"
)

// Session is the part of a loop user's configuration that the processor
// (processor.Config) and the side-effect executor (sideeffects.WorkerConfig)
// share: who the worker is in Kafka, its local store, and the loop's bounds.
// Both embed it, so each setting is declared, documented and defaulted once;
// each user maps it onto a Config of the loop (its own group, transactional
// id and topics beside it).
type Session struct {
	// Name is the worker's name: the consumer group and transactional-id
	// prefix derive from it (the processor: Name; the executor:
	// Name-executor), and the processor's dedup scope is it.
	Name string
	// InstanceID is stable per instance: the transactional id is
	// <group>-<InstanceID>, and the group membership is static under it
	// (docs/decisions/006).
	InstanceID string
	Brokers    []string
	// ClientOpts are extra kgo options (TLS, SASL, logging) for every client.
	ClientOpts      []kgo.Opt
	DeadLetterTopic string
	// Partitions is the partition count of the topics the loop creates when
	// they are missing (the processor defaults it to 4). Changelogs always
	// follow their input.
	Partitions int32
	// Store is the local state: a cache of the changelogs, never ahead of
	// Kafka (behind-kafka).
	Store *state.Store
	// MaxRecordsPerTxn bounds a transaction (bounded-transaction).
	MaxRecordsPerTxn int
	// MaxRecordBytes is kafka.maxRecordBytes: the largest input accepted and
	// record (key and value) the handler produces; the producer's batch
	// limit and created topics' max.message.bytes are raised above it
	// (MaxBatchBytes), so that the client never rejects a record the
	// handler decided to write (the processor defaults it to 1 MiB; 0 in
	// the executor: the client's and broker's defaults).
	MaxRecordBytes     int
	TransactionTimeout time.Duration
	SessionTimeout     time.Duration
	Logger             *slog.Logger
	// Now is the clock (default time.Now); tests inject one.
	Now func() time.Time
	// Hooks are test seams for fault injection; nil in production.
	Hooks *Hooks
}

// The timeouts the processor and the executor default alike (their public
// Session documents them; the configuration's defaults are these).
const (
	// DefaultPartitions is the partition count of the topics a loop
	// creates when missing.
	DefaultPartitions         = 4
	DefaultTransactionTimeout = 40 * time.Second
	DefaultSessionTimeout     = 45 * time.Second
)

// DefaultTimeouts fills the zero settings that the processor and the
// executor default alike: the transaction and session timeouts, and with
// them the logger and the clock. The bounds each user defaults differently (records
// per transaction, record size, partitions) stay with that user.
func (s *Session) DefaultTimeouts() {
	if s.TransactionTimeout <= 0 {
		s.TransactionTimeout = DefaultTransactionTimeout
	}
	if s.SessionTimeout <= 0 {
		s.SessionTimeout = DefaultSessionTimeout
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.DiscardHandler)
	}
	if s.Now == nil {
		s.Now = time.Now
	}
}

// LoopConfig is the loop Config of a user running under group: the
// session, with the transactional id <group>-<InstanceID>. The user adds
// its inputs, changelogs, outputs and the rest.
func (s *Session) LoopConfig(group string) Config {
	return Config{Session: *s, Group: group, TransactionalID: group + "-" + s.InstanceID}
}
