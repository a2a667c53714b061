package processor

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/core/changelog"
	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/internal/core/seam"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/engine/guard"
	"github.com/projector-dev/projector/projection"
)

// Mode selects live processing or a rebuild from history.
type Mode uint8

const (
	// Live produces side-effect intents.
	Live Mode = iota
	// Rebuild never produces intents; it counts them as suppressed.
	Rebuild
)

func (m Mode) String() string {
	if m == Rebuild {
		return "rebuild"
	}
	return "live"
}

// Config is everything Run needs. Build it with the fields below; zero values
// of the tunables take the documented defaults in New.
type Config struct {
	// Session is who the processor is in Kafka and its transactions'
	// bounds: Name, InstanceID and Brokers are required.
	Session

	// StateDir is the directory of the processor's local state: the
	// processor opens its Store there in New and closes it when Run
	// returns. Set it or Store.
	StateDir string
	// Store is a store opened with OpenStore, for a caller that manages it
	// (the processor never closes it). Set it or StateDir.
	Store *Store

	// Inputs are the topics of events, in the envelope of
	// docs/contract.md (required).
	Inputs []string
	// InputFormats gives the format of an input topic whose records are
	// not event envelopes, by topic; a topic it does not name is read as
	// envelopes.
	InputFormats map[string]InputFormat
	// SchemaRegistry decodes input values (and keys) framed for a
	// Confluent-compatible Schema Registry; nil: a framed value is
	// dead-lettered invalid:value.
	SchemaRegistry *SchemaRegistry
	// EffectsTopic receives the side-effect intents for the executor
	// (sideeffects.Worker); default <Name>.effects. Created when missing.
	EffectsTopic string
	// ReceiptsTopic, when set (the ingress is configured), receives one
	// receipt per new event that came through the HTTP ingress, in the same
	// transaction as the event's other outputs (internal/core/receipt). Live
	// mode only: a rebuild never writes receipts.
	ReceiptsTopic string
	// ClaimsTopic, set with ReceiptsTopic and IngressTopic (the ingress is
	// configured), is an internal input: the ingress's claims, one record
	// per HTTP request, keyed by (tenant, Idempotency-Key). The first claim
	// of a key wins and its events are forwarded to IngressTopic; a later
	// one forwards nothing (claim.go, docs/decisions/012-ingress-claims.md).
	// It is created when missing with IngressTopic's partition count. Live
	// mode only: a rebuild reads the input topics alone, so no claim is
	// ever forwarded twice.
	ClaimsTopic string
	// IngressTopic is the input topic the winning claims' events are
	// forwarded to; one of Inputs.
	IngressTopic string
	// WaitForInputs: a missing input topic is waited for (logged, and the
	// reason /readyz gives), never created. Set on a real cluster, where an
	// input's partition count is the operator's decision; off (the
	// embedded broker, tests) missing inputs are created with Partitions.
	WaitForInputs bool

	Projections []*projection.Projection
	// EffectRules turn applied events into side-effect intents (the
	// configured sideEffects); nil means only handler-returned intents.
	EffectRules EffectRules
	// Dedup remembers event ids; default dedup.NewStore with
	// dedup.DefaultRetention.
	Dedup *dedup.Store

	// HoldTimeout is how long an aggregate's gap stays open before
	// GapPolicy decides; default DefaultHoldTimeout.
	HoldTimeout time.Duration
	// GapPolicy is what an expired gap does; default projection.Wait.
	GapPolicy projection.Policy
	// MaxHeld bounds one aggregate's held events; default DefaultMaxHeld.
	MaxHeld int64

	Mode Mode
	// Group overrides the consumer group and transactional-id prefix (default
	// Name). A rebuild runs under its own group so that it never touches the
	// live worker's offsets or transactions; Name stays the dedup scope.
	Group string
	// StartOffset is where a group with no committed offsets starts (default
	// the earliest offset; a rebuild --from a time uses AfterMilli).
	StartOffset *kgo.Offset
	// StandbyReplicas is how many other instances keep a standby copy of
	// each input partition's state, tailing its changelog, so that one
	// taking the partition over restores only what it has not read yet
	// (docs/decisions/017). The group then gives each partition to the
	// instance whose state is furthest along. 0 (the default): none. Live
	// mode only.
	StandbyReplicas int

	// seams: what only the repository's own code sets (internal/core/seam).
	seams seam.Seams
}

// EffectRules build the side-effect intents of an applied event (the
// configured rules: *effect.Rules of package sideeffects/effect). An error
// names effects whose key could not be built; the intents that could be
// built are still returned. Intents is called from several goroutines at
// once (one per input partition being processed).
type EffectRules interface {
	Intents(projection string, ev *projection.Event, version int64) ([]projection.Intent, error)
}

// ChangelogTopic names the changelog of one input topic (name is the
// processor's group): changelog.Topic, which also names the executor's.
func ChangelogTopic(name, input string) string { return changelog.Topic(name, input) }

func (c *Config) applyDefaults() {
	if c.Partitions <= 0 {
		c.Partitions = DefaultPartitions
	}
	if c.HoldTimeout <= 0 {
		c.HoldTimeout = DefaultHoldTimeout
	}
	if c.MaxHeld <= 0 {
		c.MaxHeld = DefaultMaxHeld
	}
	if c.MaxRecordsPerTxn <= 0 {
		c.MaxRecordsPerTxn = DefaultMaxRecordsPerTxn
	}
	if c.MaxRecordBytes <= 0 {
		c.MaxRecordBytes = envelope.DefaultMaxBytes
	}
	if c.TransactionTimeout <= 0 {
		c.TransactionTimeout = DefaultTransactionTimeout
	}
	if c.SessionTimeout <= 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.seams.Now == nil {
		c.seams.Now = time.Now
	}
	// The topic names the command-line configuration defaults to
	// (docs/configuration.md).
	if c.Name != "" && c.DeadLetterTopic == "" {
		c.DeadLetterTopic = c.Name + ".dlq"
	}
	if c.Name != "" && c.EffectsTopic == "" && c.Mode == Live {
		c.EffectsTopic = c.Name + ".effects"
	}
	if c.Group == "" {
		c.Group = c.Name
	}
	if c.Dedup == nil {
		c.Dedup = dedup.NewStore(dedup.DefaultRetention)
	}
}

func (c *Config) validate() error {
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("processor: Name is required"))
	}
	if c.InstanceID == "" {
		errs = append(errs, errors.New("processor: InstanceID is required"))
	}
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("processor: Brokers is required"))
	}
	if len(c.Inputs) == 0 {
		errs = append(errs, errors.New("processor: Inputs is required"))
	}
	if len(c.Projections) == 0 {
		errs = append(errs, errors.New("processor: at least one projection is required"))
	}
	for i, p := range c.Projections {
		if p == nil || p.Name == "" || p.Topic == "" || p.Handler == nil {
			errs = append(errs, fmt.Errorf("processor: projection %d needs Name, Topic and Handler", i))
		}
	}
	if c.Store == nil && c.StateDir == "" && c.seams.Store == nil {
		errs = append(errs, errors.New("processor: StateDir or Store is required"))
	}
	if c.Store != nil && c.Store.st == nil {
		errs = append(errs, errors.New("processor: Store is closed"))
	}
	if c.Mode == Live && c.ClaimsTopic != "" {
		switch {
		case c.ReceiptsTopic == "" || !slices.Contains(c.Inputs, c.IngressTopic):
			errs = append(errs, errors.New("processor: ClaimsTopic needs ReceiptsTopic, and IngressTopic among Inputs"))
		case slices.Contains(c.Inputs, c.ClaimsTopic):
			errs = append(errs, errors.New("processor: ClaimsTopic must not be one of Inputs"))
		}
	}
	return errors.Join(errs...)
}

// storeOptions are the options of a processor's store, with a block cache of
// cacheBytes (0: the store's default). The store runs without Pebble's WAL:
// it is a cache of the changelogs, and a crash leaves it a prefix of its
// commits with their changelog position, from which the restore reads the
// rest (docs/decisions/016).
func storeOptions(cacheBytes int64) state.Options {
	return state.Options{CacheBytes: cacheBytes, Cached: cached, FilterOnly: heldKey, NoWAL: true}
}

// heldKey selects the held events among the cached keys for the filter
// alone: "first arrival wins" asks the filter, but a held event's value (the
// whole event) is read back once, when its gap closes, and caching it cost
// a stream of held events a cache insert per record and evicted the
// aggregates the cache is for.
func heldKey(changelogKey []byte) bool {
	return len(changelogKey) > 0 && (changelogKey[0] == guard.KindHeld || changelogKey[0] == claimKind)
}

// cached selects the keys the store keeps fast paths for (the value cache
// and the key filter): aggregate records are read again by the aggregate's
// next event; held events are looked up by every event that arrives ahead
// of its version ("first arrival wins" asks whether the version is held
// already, almost always not: the filter answers without Pebble, so a
// stream of held events is no slower than valid ones), and their values
// stay out of the value cache (heldKey); so do decided claims, looked up by
// every claim and almost always absent. Dedup marks (write-once, read
// rarely: the per-task filter and the recent-ids cache answer most checks)
// are not selected.
func cached(changelogKey []byte) bool {
	return len(changelogKey) > 0 && (changelogKey[0] == guard.KindAggregate || changelogKey[0] == guard.KindHeld ||
		changelogKey[0] == claimKind)
}
