package config

import (
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/sideeffects/effect"
	"github.com/projector-dev/projector/sideeffects/webhook"
)

// Defaults. Zero values in a Config are replaced by these in ApplyDefaults,
// and by those of the packages that use them: a side effect's
// webhook.DefaultTimeout, effect.DefaultMaxAttempts and
// effect.OnUnknownRetry. A default of a processor setting is the
// processor's (or dedup's) own constant, declared once there.
const (
	DefaultTransactionTimeout       = processor.DefaultTransactionTimeout
	DefaultMaxRecordsPerTransaction = processor.DefaultMaxRecordsPerTxn
	DefaultSessionTimeout           = processor.DefaultSessionTimeout
	DefaultEmbeddedListen           = "127.0.0.1:9092"
	DefaultEmbeddedPartitions       = processor.DefaultPartitions
	DefaultCacheSize                = 64 << 20 // 64 MiB
	DefaultDedupRetention           = dedup.DefaultRetention
	DefaultHoldTimeout              = processor.DefaultHoldTimeout
	DefaultMaxHeldPerAggregate      = processor.DefaultMaxHeld
	DefaultHTTPListen               = "127.0.0.1:9464"

	// HTTPOff as http.listen disables the HTTP server.
	HTTPOff = "off"
	// EmbeddedBrokers as kafka.brokers selects the in-process broker.
	EmbeddedBrokers = "embedded"
)

// Gap timeout policies (gaps.onTimeout).
const (
	OnTimeoutWait       = "wait"
	OnTimeoutSkip       = "skip"
	OnTimeoutDeadLetter = "deadletter"
)

// Projection event rules (projections[].events values).
const (
	RuleMerge  = "merge"
	RuleDelete = "delete"
)

// Unknown-outcome policies (sideEffects[].onUnknown): the executor's own
// values, declared by package effect.
const (
	OnUnknownRetry = effect.OnUnknownRetry
	OnUnknownPark  = effect.OnUnknownPark
)

// SASL mechanisms (kafka.sasl.mechanism).
const (
	SASLPlain       = "PLAIN"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLScramSHA512 = "SCRAM-SHA-512"
)

// Config is the whole processor configuration.
type Config struct {
	// Name is the processor name: consumer group, transactional-id prefix,
	// dedup scope and default topic names. Required, [A-Za-z0-9._-]+.
	Name        string       `yaml:"name"`
	Kafka       Kafka        `yaml:"kafka"`
	State       State        `yaml:"state"`
	Dedup       Dedup        `yaml:"dedup"`
	Gaps        Gaps         `yaml:"gaps"`
	Projections []Projection `yaml:"projections"` // at least one; unique names and topics
	SideEffects []SideEffect `yaml:"sideEffects"`
	HTTP        HTTP         `yaml:"http"`
	// Ingress is the optional HTTP front door (POST /v1/events); nil when
	// the section is absent, and then it is off.
	Ingress *Ingress `yaml:"ingress"`
	// SchemaRegistry is the optional Schema Registry for input values
	// framed for one; nil when the section is absent.
	SchemaRegistry *SchemaRegistry `yaml:"schemaRegistry"`
	// Tracing configures the OpenTelemetry spans; off by default.
	Tracing Tracing `yaml:"tracing"`
}

// Kafka configures the client and the topics.
type Kafka struct {
	// Brokers are host:port seed brokers. In YAML: a list, a comma-separated
	// string, or the string "embedded", which sets Embedded and leaves
	// Brokers empty.
	Brokers []string `yaml:"brokers"`
	// Embedded selects the in-process, single-node broker (development and
	// demos only).
	Embedded bool `yaml:"-"`
	// EmbeddedBroker configures the in-process broker; ignored unless Embedded.
	EmbeddedBroker EmbeddedBroker `yaml:"embeddedBroker"`
	// InstanceID is stable per instance and part of the transactional id.
	// Default: the host name. Instances sharing a host need distinct ids.
	InstanceID string `yaml:"instanceId"`
	// InstanceIDDefaulted: InstanceID was not configured and is the host
	// name (ApplyDefaults); the worker warns at start.
	InstanceIDDefaulted bool `yaml:"-"`
	// Input lists the source topics and their formats; at least one.
	Input []InputTopic `yaml:"input"`
	// DeadLetterTopic defaults to "<name>.dlq".
	DeadLetterTopic string `yaml:"deadLetterTopic"`
	// EffectsTopic (side-effect intents) defaults to "<name>.effects".
	EffectsTopic string `yaml:"effectsTopic"`
	// TransactionTimeout defaults to 40s; must be below 15m (Kafka's default
	// transaction.max.timeout.ms).
	TransactionTimeout Duration `yaml:"transactionTimeout"`
	// MaxRecordsPerTransaction bounds one transaction's work; default 5000,
	// 1..1000000.
	MaxRecordsPerTransaction int `yaml:"maxRecordsPerTransaction"`
	// MaxRecordBytes is the one record size limit: the largest input
	// event accepted and the largest record produced (projection,
	// changelog, held wrapper, intent). An event whose outputs would
	// exceed it is dead-lettered too-large. Default 1MiB, 1KiB..64MiB.
	MaxRecordBytes ByteSize `yaml:"maxRecordBytes"`
	// SessionTimeout is the consumer group session timeout; default 45s.
	SessionTimeout Duration `yaml:"sessionTimeout"`
	// TLS is optional; TLS is used only when TLS != nil && TLS.Enabled.
	TLS *TLS `yaml:"tls"`
	// SASL is optional; when set, mechanism, username and password are all
	// required.
	SASL *SASL `yaml:"sasl"`
}

// TLSEnabled reports whether the client must use TLS.
func (k *Kafka) TLSEnabled() bool { return k.TLS != nil && k.TLS.Enabled }

// TLS configures TLS to the brokers. Relative file paths are relative to the
// working directory.
type TLS struct {
	Enabled            bool   `yaml:"enabled"`
	CAFile             string `yaml:"caFile"`   // default: the system roots
	CertFile           string `yaml:"certFile"` // client certificate; with keyFile
	KeyFile            string `yaml:"keyFile"`
	ServerName         string `yaml:"serverName"`
	InsecureSkipVerify bool   `yaml:"insecureSkipVerify"`
}

// SASL configures SASL authentication.
type SASL struct {
	Mechanism string `yaml:"mechanism"` // PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
	Username  string `yaml:"username"`
	Password  string `yaml:"password"`
}

// EmbeddedBroker configures the in-process broker.
type EmbeddedBroker struct {
	// Dir holds the broker's data; default "<parent of state.dir>/embedded-kafka".
	Dir string `yaml:"dir"`
	// Listen is the TCP address; default 127.0.0.1:9092. Port 0 picks a free port.
	Listen string `yaml:"listen"`
	// Partitions per auto-created topic; default 4, 1..1024.
	Partitions int `yaml:"partitions"`
}

// State configures the local Pebble store.
type State struct {
	// Dir is the Pebble directory, relative to the working directory;
	// default "./data/<name>".
	Dir string `yaml:"dir"`
	// CacheSize is the block cache size; default 64MiB. YAML: bytes as an
	// integer, or a size such as "64MiB", "1GiB", "500MB".
	CacheSize ByteSize `yaml:"cacheSize"`
	// StandbyReplicas is how many other instances keep a standby copy of
	// each input partition's state (processor.Config.StandbyReplicas);
	// default 0.
	StandbyReplicas int `yaml:"standbyReplicas"`
}

// Dedup configures the event-id store.
type Dedup struct {
	// Retention is how long event ids are remembered; default 168h.
	Retention Duration `yaml:"retention"`
}

// Gaps configures the handling of version gaps.
type Gaps struct {
	// HoldTimeout is how long a gap is held before it is reported; default 5m.
	HoldTimeout Duration `yaml:"holdTimeout"`
	// OnTimeout is wait | skip | deadletter; default wait.
	OnTimeout string `yaml:"onTimeout"`
	// MaxHeldPerAggregate bounds the held events of one aggregate; default 10000.
	MaxHeldPerAggregate int `yaml:"maxHeldPerAggregate"`
}

// Projection is one declarative projection.
type Projection struct {
	// Name is required, unique, [A-Za-z0-9._-]+.
	Name string `yaml:"name"`
	// Topic is the compacted output topic; required and unique.
	Topic string `yaml:"topic"`
	// AggregateTypes, when not empty, selects the events this projection sees.
	AggregateTypes []string `yaml:"aggregateTypes"`
	// Versioned enables the version guard; default true. Use IsVersioned.
	Versioned *bool `yaml:"versioned"`
	// Events maps eventType to rule ("merge" or "delete"); at least one entry.
	// Unlisted types advance the version only.
	Events map[string]string `yaml:"events"`
}

// IsVersioned reports whether the version guard applies (default true).
func (p *Projection) IsVersioned() bool { return p.Versioned == nil || *p.Versioned }

// Selects reports whether an event of aggregateType is seen by p.
func (p *Projection) Selects(aggregateType string) bool {
	return len(p.AggregateTypes) == 0 || slices.Contains(p.AggregateTypes, aggregateType)
}

// SideEffect is one external effect triggered by applied events. The
// wiring (internal/app/wiring) makes of it the processor's effect.Rule and
// the executor's sideeffects.Effect, calling a webhook.Client.
type SideEffect struct {
	// Name is required, unique, [A-Za-z0-9._-]+.
	Name string `yaml:"name"`
	// On lists the event types that trigger it; required, non-empty.
	On []string `yaml:"on"`
	// When optionally restricts it to events matching a condition.
	When *Condition `yaml:"when"`
	// Key is the idempotency key template; required. See effect.ParseTemplate.
	Key string `yaml:"key"`
	// Webhook is the executor target.
	Webhook Webhook `yaml:"webhook"`
	// MaxAttempts for retryable failures; default effect.DefaultMaxAttempts
	// (8), 1..1000.
	MaxAttempts int `yaml:"maxAttempts"`
	// OnUnknown is retry | park; default retry.
	OnUnknown string `yaml:"onUnknown"`
}

// Condition restricts a side effect to events whose Field equals Equals:
// the YAML form of an effect.Condition, which says what they mean.
type Condition struct {
	// Field is a dotted path into the event envelope, e.g. eventType or
	// payload.reasonCode.
	Field string `yaml:"field"`
	// Equals is the value to compare with; required and not null. From YAML
	// it holds what encoding/json would decode into any (string, float64,
	// bool, []any, map[string]any).
	Equals any `yaml:"equals"`
}

// Webhook is an HTTP POST target.
type Webhook struct {
	// URL is an absolute http or https URL; required.
	URL string `yaml:"url"`
	// Timeout per request; default webhook.DefaultTimeout (5s).
	Timeout Duration `yaml:"timeout"`
	// SigningSecret, when set, signs every call as the Standard Webhooks
	// specification defines (webhook-id, webhook-timestamp,
	// webhook-signature): one secret, or several during a rotation, each
	// whsec_ + base64 of a 24 to 64 byte key. Optional. The secrets are the
	// webhook's own type, which never prints its value (secret.go decodes
	// and checks them).
	SigningSecret webhook.SigningSecrets `yaml:"signingSecret"`
}

// HTTP configures the metrics and health endpoint server.
type HTTP struct {
	// Listen is host:port; default 127.0.0.1:9464. "off" disables the server,
	// as does an explicit empty string in YAML (listen: "").
	Listen string `yaml:"listen"`
}

// Enabled reports whether the HTTP server should run.
func (h HTTP) Enabled() bool { return h.Listen != "" && h.Listen != HTTPOff }

// Ingress defaults.
const (
	DefaultIngressTimeout  = 10 * time.Second
	DefaultIngressMaxBatch = 100
)

// Ingress configures the HTTP front door (docs/ingress.md). Every instance
// of a deployment shares the section: processors write receipts when it is
// present, whether or not they serve the listener themselves.
type Ingress struct {
	// Listen is host:port of the ingress listener; required. "off"
	// disables the listener while the processor still writes receipts
	// (instances that only process).
	Listen string `yaml:"listen"`
	// Topic is the input topic events are written to; default the first of
	// kafka.input, and it must be one of them.
	Topic string `yaml:"topic"`
	// ReceiptsTopic (compacted) holds one receipt per ingested event;
	// default "<name>.receipts".
	ReceiptsTopic string `yaml:"receiptsTopic"`
	// ClaimsTopic holds one claim per request, keyed by tenant and
	// Idempotency-Key, which the processors decide (first wins); default
	// "<name>.claims". Created when missing with the partition count of
	// Topic.
	ClaimsTopic string `yaml:"claimsTopic"`
	// Timeout is how long a request waits for its committed receipt before
	// it is answered 202 Accepted with a Location to poll; default 10s.
	Timeout Duration `yaml:"timeout"`
	// MaxBodyBytes bounds a request body (413 above it); default
	// kafka.maxRecordBytes.
	MaxBodyBytes ByteSize `yaml:"maxBodyBytes"`
	// MaxBatch bounds the events of one {"events":[…]} request; default 100.
	MaxBatch int `yaml:"maxBatch"`
	// RequireTenant makes X-Tenant-ID mandatory (400 without it).
	RequireTenant bool `yaml:"requireTenant"`
	// Auth says who may use the ingress; required unless Listen is a
	// loopback address (ingressauth.go).
	Auth *IngressAuth `yaml:"auth"`
	// TLS serves the ingress over TLS, with client certificates optional.
	TLS *IngressTLS `yaml:"tls"`
	// RateLimit bounds each tenant's requests that write events.
	RateLimit *IngressRateLimit `yaml:"rateLimit"`
	// ReloadInterval is how often the files of auth and tls are checked for
	// change; default 5s.
	ReloadInterval Duration `yaml:"reloadInterval"`
}

// Enabled reports whether the ingress listener should run.
func (in *Ingress) Enabled() bool { return in != nil && in.Listen != "" && in.Listen != HTTPOff }

// Default returns a Config with every default that does not depend on other
// settings applied, and no projections. It does not pass Validate as is: Name,
// brokers, input and projections must be set.
func Default() *Config {
	c := &Config{}
	c.ApplyDefaults()
	return c
}

// ApplyDefaults replaces zero values with their defaults. Defaults derived
// from Name (topics, state dir) are applied only when Name is set. It is
// idempotent.
func (c *Config) ApplyDefaults() {
	k := &c.Kafka
	if k.InstanceID == "" {
		// On failure InstanceID stays empty and Validate reports it.
		if h, err := os.Hostname(); err == nil {
			k.InstanceID, k.InstanceIDDefaulted = h, true
		}
	}
	if c.Name != "" {
		if k.DeadLetterTopic == "" {
			k.DeadLetterTopic = c.Name + ".dlq"
		}
		if k.EffectsTopic == "" {
			k.EffectsTopic = c.Name + ".effects"
		}
		if c.State.Dir == "" {
			c.State.Dir = "./data/" + c.Name
		}
	}
	if k.TransactionTimeout == 0 {
		k.TransactionTimeout = Duration(DefaultTransactionTimeout)
	}
	if k.MaxRecordsPerTransaction == 0 {
		k.MaxRecordsPerTransaction = DefaultMaxRecordsPerTransaction
	}
	if k.MaxRecordBytes == 0 {
		k.MaxRecordBytes = envelope.DefaultMaxBytes // the envelope's own limit
	}
	if k.SessionTimeout == 0 {
		k.SessionTimeout = Duration(DefaultSessionTimeout)
	}
	c.Tracing.applyDefaults()
	eb := &k.EmbeddedBroker
	if eb.Dir == "" && c.State.Dir != "" {
		eb.Dir = filepath.Join(filepath.Dir(c.State.Dir), "embedded-kafka")
	}
	if eb.Listen == "" {
		eb.Listen = DefaultEmbeddedListen
	}
	if eb.Partitions == 0 {
		eb.Partitions = DefaultEmbeddedPartitions
	}
	if c.State.CacheSize == 0 {
		c.State.CacheSize = DefaultCacheSize
	}
	if c.Dedup.Retention == 0 {
		c.Dedup.Retention = Duration(DefaultDedupRetention)
	}
	if c.Gaps.HoldTimeout == 0 {
		c.Gaps.HoldTimeout = Duration(DefaultHoldTimeout)
	}
	if c.Gaps.OnTimeout == "" {
		c.Gaps.OnTimeout = OnTimeoutWait
	}
	if c.Gaps.MaxHeldPerAggregate == 0 {
		c.Gaps.MaxHeldPerAggregate = DefaultMaxHeldPerAggregate
	}
	for i := range c.Projections {
		p := &c.Projections[i]
		if p.Versioned == nil {
			t := true
			p.Versioned = &t
		}
	}
	for i := range c.SideEffects {
		s := &c.SideEffects[i]
		if s.Webhook.Timeout == 0 {
			s.Webhook.Timeout = Duration(webhook.DefaultTimeout)
		}
		if s.MaxAttempts == 0 {
			s.MaxAttempts = effect.DefaultMaxAttempts
		}
		if s.OnUnknown == "" {
			s.OnUnknown = effect.OnUnknownRetry
		}
	}
	if c.HTTP.Listen == "" {
		c.HTTP.Listen = DefaultHTTPListen
	}
	if in := c.Ingress; in != nil {
		if in.Topic == "" && len(k.Input) > 0 {
			in.Topic = k.Input[0].Topic
		}
		if in.ReceiptsTopic == "" && c.Name != "" {
			in.ReceiptsTopic = c.Name + ".receipts"
		}
		if in.ClaimsTopic == "" && c.Name != "" {
			in.ClaimsTopic = c.Name + ".claims"
		}
		if in.Timeout == 0 {
			in.Timeout = Duration(DefaultIngressTimeout)
		}
		if in.MaxBodyBytes == 0 {
			in.MaxBodyBytes = k.MaxRecordBytes
		}
		if in.MaxBatch == 0 {
			in.MaxBatch = DefaultIngressMaxBatch
		}
		in.applySecurityDefaults()
	}
}

// Load reads the file at path and parses it with the process environment.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{Msg: err.Error(), Err: err}
	}
	return Parse(data, os.LookupEnv)
}

// OrDefault is v, or d when v is not positive: how the option structs built
// from this configuration (and the bench's) take their documented defaults
// for zero values.
func OrDefault[T ~int | ~int32 | ~int64](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}
