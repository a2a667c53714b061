package processor

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/projector-dev/projector/internal/core/inputformat"
	"github.com/projector-dev/projector/internal/core/schemaregistry"
)

// Format names how an input topic's records carry events
// (docs/configuration.md#input-formats).
type Format string

// The input formats. The zero Format is FormatEnvelope.
const (
	// FormatEnvelope: the record value is the event envelope of
	// docs/contract.md#event-envelope.
	FormatEnvelope Format = "envelope"
	// FormatCloudEvents: CloudEvents 1.0 in the Kafka protocol binding,
	// binary or structured mode.
	FormatCloudEvents Format = "cloudevents"
	// FormatDebeziumOutbox: records of Debezium's Outbox Event Router, with
	// its defaults.
	FormatDebeziumOutbox Format = "debezium-outbox"
	// FormatMapped: any JSON object; InputFormat.Fields says where each
	// envelope member is.
	FormatMapped Format = "mapped"
)

// InputFormat is the format of one input topic's records.
type InputFormat struct {
	// Format of the records; "" is FormatEnvelope.
	Format Format
	// Fields maps an envelope member (eventId, eventType, aggregateId,
	// aggregateType, aggregateVersion, tenantId, occurredAt, correlationId,
	// causationId, producer, payload) to where its value is: an RFC 6901
	// JSON Pointer into the value, "header:<name>" or "key". For
	// FormatCloudEvents and FormatDebeziumOutbox it overrides the format's
	// defaults member by member; for FormatMapped it is the whole mapping
	// and names eventId, eventType and aggregateId. FormatEnvelope takes
	// none.
	Fields map[string]string
}

// SchemaRegistry configures the client of a Confluent-compatible Schema
// Registry, for values (and keys) framed for one: magic byte 0 and a
// schema id, Avro, Protobuf or JSON Schema.
type SchemaRegistry struct {
	// URL of the registry; a comma-separated list is tried in order.
	URL string
	// Username and Password: HTTP basic authentication; not with
	// BearerToken.
	Username, Password string
	// BearerToken is sent as "Authorization: Bearer <token>".
	BearerToken string
	// CAFile (default: the system roots), CertFile and KeyFile (a client
	// certificate), ServerName and InsecureSkipVerify configure TLS for
	// https URLs.
	CAFile, CertFile, KeyFile, ServerName string
	InsecureSkipVerify                    bool
	// Timeout bounds each request; a slower registry is unavailable and its
	// records wait. Default 5s.
	Timeout time.Duration
	// CacheSize is the number of schema ids kept; default 1000.
	CacheSize int
}

func (s *SchemaRegistry) options() schemaregistry.Options {
	o := schemaregistry.Options{URL: s.URL, Username: s.Username, Password: s.Password,
		BearerToken: s.BearerToken, Timeout: s.Timeout, CacheSize: s.CacheSize}
	if s.CAFile != "" || s.CertFile != "" || s.KeyFile != "" || s.ServerName != "" || s.InsecureSkipVerify {
		o.TLS = &schemaregistry.TLS{CAFile: s.CAFile, CertFile: s.CertFile, KeyFile: s.KeyFile,
			ServerName: s.ServerName, InsecureSkipVerify: s.InsecureSkipVerify}
	}
	return o
}

// decoders builds the decoder of every input topic whose format is not the
// envelope (the envelope's records are decoded as before, without one).
func (c *Config) decoders() (map[string]*inputformat.Decoder, error) {
	var schemas inputformat.Schemas
	if c.SchemaRegistry != nil {
		cl, err := schemaregistry.New(c.SchemaRegistry.options())
		if err != nil {
			return nil, fmt.Errorf("processor: SchemaRegistry: %w", err)
		}
		schemas = cl
	}
	var errs []error
	out := map[string]*inputformat.Decoder{}
	for topic, f := range c.InputFormats {
		if !slices.Contains(c.Inputs, topic) {
			errs = append(errs, fmt.Errorf("processor: InputFormats names %q, which is not one of Inputs %v", topic, c.Inputs))
			continue
		}
		if f.Format == "" || f.Format == FormatEnvelope {
			if len(f.Fields) > 0 {
				errs = append(errs, fmt.Errorf("processor: InputFormats[%q]: the envelope format takes no Fields", topic))
			}
			continue
		}
		d, err := inputformat.New(inputformat.Options{Format: inputformat.Format(f.Format), Fields: f.Fields,
			MaxRecordBytes: c.MaxRecordBytes, Schemas: schemas})
		if err != nil {
			var oe *inputformat.OptionError
			if errors.As(err, &oe) {
				err = fmt.Errorf("%s: %s", oe.Key, oe.Msg)
			}
			errs = append(errs, fmt.Errorf("processor: InputFormats[%q]: %w", topic, err))
			continue
		}
		out[topic] = d
	}
	return out, errors.Join(errs...)
}
