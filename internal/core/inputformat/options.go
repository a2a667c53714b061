package inputformat

import (
	"context"
	"sort"
	"strings"

	"github.com/projector-dev/projector/internal/core/envelope"
)

// Format names how an input topic's records carry events.
type Format string

// The formats. The zero Format is Envelope.
const (
	Envelope       Format = "envelope"        // the record value is the event envelope (docs/contract.md#event-envelope)
	CloudEvents    Format = "cloudevents"     // CloudEvents 1.0, Kafka protocol binding, binary or structured mode
	DebeziumOutbox Format = "debezium-outbox" // Debezium's Outbox Event Router with its defaults
	Mapped         Format = "mapped"          // any JSON object; Options.Fields says where each member is
)

// Formats lists the formats, for configuration messages.
var Formats = []Format{Envelope, CloudEvents, DebeziumOutbox, Mapped}

// Options configure the decoder of one input topic. They are plain values:
// the configuration package maps its YAML onto them.
type Options struct {
	// Format is the topic's format; "" means Envelope.
	Format Format
	// Fields maps an envelope member (eventId, eventType, aggregateId,
	// aggregateType, aggregateVersion, tenantId, occurredAt, correlationId,
	// causationId, producer, payload) to where its value is:
	//   - an RFC 6901 JSON Pointer into the value ("/order/id"; "" is the
	//     whole value). For CloudEvents it points into the event in its
	//     structured form: "/subject" is the subject attribute (the
	//     ce_subject header in binary mode), "/data/orderId" a member of the
	//     data;
	//   - "header:<name>": the last record header with that name;
	//   - "key": the record key.
	// For cloudevents and debezium-outbox the entries override the format's
	// defaults (see DefaultFields); for mapped they are the whole mapping and
	// must name eventId, eventType and aggregateId. The envelope format takes
	// none.
	Fields map[string]string
	// MaxRecordBytes is the largest record value accepted and the largest
	// value a Schema Registry framed value may decode to; <= 0 means
	// envelope.DefaultMaxBytes. The processor passes kafka.maxRecordBytes.
	MaxRecordBytes int
	// Schemas decodes Schema Registry framed values and keys. nil: a framed
	// value is invalid:value (no registry configured).
	Schemas Schemas
}

// Schemas decodes values framed for a Confluent-compatible Schema Registry
// (magic byte 0, a 4-byte big-endian schema id, the Protobuf message
// indexes, the encoded data) into JSON. *schemaregistry.Client implements
// it. Errors are *schemaregistry.InvalidError for a value that can never
// decode (an unknown schema id, data that does not fit its schema), and
// errors wrapping schemaregistry.ErrUnavailable for one that might decode
// later.
type Schemas interface {
	// Decode appends the JSON form of framed to dst; the JSON may be at
	// most maxBytes long.
	Decode(ctx context.Context, framed, dst []byte, maxBytes int) ([]byte, error)
	// Prefetch makes sure the schema with this id is cached.
	Prefetch(ctx context.Context, id int) error
}

// OptionError is an invalid option. Key names it as the configuration does
// below the input entry: "format", "fields.eventId".
type OptionError struct{ Key, Msg string }

func (e *OptionError) Error() string { return "inputformat: " + e.Key + ": " + e.Msg }

// member is an envelope member, in the order the built envelope has them.
type member uint8

const (
	mEventID member = iota
	mEventType
	mAggregateID
	mAggregateType
	mAggregateVersion
	mTenantID
	mOccurredAt
	mCorrelationID
	mCausationID
	mProducer
	mPayload
	nMembers
)

var memberNames = [nMembers]string{
	"eventId", "eventType", "aggregateId", "aggregateType", "aggregateVersion",
	"tenantId", "occurredAt", "correlationId", "causationId", "producer", "payload",
}

// memberKeys are the members as they start a member of the built envelope.
var memberKeys = func() (k [nMembers]string) {
	for i, n := range memberNames {
		k[i] = `"` + n + `":`
	}
	return k
}()

func (m member) String() string { return memberNames[m] }

func isRequired(m member) bool { return m == mEventID || m == mEventType || m == mAggregateID }

// srcKind is where a member's value comes from.
type srcKind uint8

const (
	srcNone srcKind = iota
	srcPointer
	srcHeader
	srcKey
)

type source struct {
	kind   srcKind
	ptr    pointer // srcPointer
	header string  // srcHeader
}

func parseSource(s string) (source, error) {
	switch {
	case s == "key":
		return source{kind: srcKey}, nil
	case strings.HasPrefix(s, "header:"):
		name := strings.TrimPrefix(s, "header:")
		if name == "" {
			return source{}, &OptionError{Msg: "header: needs a header name"}
		}
		return source{kind: srcHeader, header: name}, nil
	}
	p, err := parsePointer(s)
	if err != nil {
		return source{}, &OptionError{Msg: err.Error() + ` (or write "header:<name>" or "key")`}
	}
	return source{kind: srcPointer, ptr: p}, nil
}

// DefaultFields returns the format's default Fields, which Options.Fields
// overrides member by member.
func DefaultFields(f Format) map[string]string {
	switch f {
	case CloudEvents:
		// The CloudEvents attributes and extensions the issue names; the
		// dedup identity is (source, eventId) on top of these.
		return map[string]string{
			"eventId": "/id", "eventType": "/type", "aggregateId": "/subject",
			"aggregateVersion": "/sequence", "occurredAt": "/time", "payload": "/data",
			"tenantId": "/tenantid",
		}
	case DebeziumOutbox:
		// The Outbox Event Router's defaults: table.field.event.id=id puts
		// the event id in header "id"; table.field.event.key=aggregateid
		// makes the aggregate id the key; the value is the payload column;
		// table.fields.additional.placement=type:header:eventType puts the
		// type in header "eventType". No version by default.
		return map[string]string{
			"eventId": "header:id", "eventType": "header:eventType", "aggregateId": "key", "payload": "",
		}
	}
	return nil
}

// fieldsFor validates o.Fields against the format and returns the merged
// sources.
func fieldsFor(f Format, given map[string]string) ([nMembers]source, error) {
	var out [nMembers]source
	if f == Envelope {
		if len(given) > 0 {
			return out, &OptionError{Key: "fields", Msg: "the envelope format takes no fields (use format: mapped)"}
		}
		return out, nil
	}
	merged := DefaultFields(f)
	if merged == nil {
		merged = map[string]string{}
	}
	names := make([]string, 0, len(given))
	for name := range given {
		names = append(names, name)
	}
	sort.Strings(names) // the first bad key in a stable order
	for _, name := range names {
		if lookupMember(name) == nMembers {
			return out, &OptionError{Key: "fields." + name, Msg: "not an envelope member (" + strings.Join(memberNames[:], ", ") + ")"}
		}
		merged[name] = given[name]
	}
	for name, s := range merged {
		src, err := parseSource(s)
		if err != nil {
			err.(*OptionError).Key = "fields." + name
			return out, err
		}
		out[lookupMember(name)] = src
	}
	for _, m := range [...]member{mEventID, mEventType, mAggregateID} {
		if out[m].kind == srcNone {
			return out, &OptionError{Key: "fields." + m.String(), Msg: "required: the " + string(f) + " format needs to know where the " + m.String() + " is"}
		}
	}
	return out, nil
}

func lookupMember(name string) member {
	for i, n := range memberNames {
		if n == name {
			return member(i)
		}
	}
	return nMembers
}

// New returns the decoder for one input topic's options.
func New(o Options) (*Decoder, error) {
	f := o.Format
	if f == "" {
		f = Envelope
	}
	known := false
	for _, k := range Formats {
		known = known || k == f
	}
	if !known {
		names := make([]string, len(Formats))
		for i, k := range Formats {
			names[i] = string(k)
		}
		return nil, &OptionError{Key: "format", Msg: "unknown format " + string(f) + " (" + strings.Join(names, ", ") + ")"}
	}
	fields, err := fieldsFor(f, o.Fields)
	if err != nil {
		return nil, err
	}
	d := &Decoder{format: f, passThrough: f == Envelope, fields: fields, maxBytes: o.MaxRecordBytes, schemas: o.Schemas}
	if d.maxBytes <= 0 {
		d.maxBytes = envelope.DefaultMaxBytes
	}
	for _, s := range fields {
		d.usesKey = d.usesKey || s.kind == srcKey
	}
	return d, nil
}
