package inputformat

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/internal/core/schemaregistry"
)

// ErrUnavailable is wrapped by every error of Decode and Prepare after
// which the record might still decode: the Schema Registry is down, slow,
// refusing the credentials or answering nonsense. The caller holds the
// partition and retries; it never dead-letters such a record.
var ErrUnavailable = schemaregistry.ErrUnavailable

// Decoder decodes the records of one input topic. It is safe for
// concurrent use.
type Decoder struct {
	format      Format
	passThrough bool // the envelope format
	fields      [nMembers]source
	maxBytes    int
	schemas     Schemas
	usesKey     bool // a member comes from the key: a framed key is fetched too
}

// Format is the decoder's format.
func (d *Decoder) Format() Format { return d.format }

// Result is one decoded record.
type Result struct {
	// Value is the event envelope, for envelope.DecodeInto: the record
	// value itself for the envelope format (no copy), else built in the dst
	// passed to Decode. A decoded Event's Payload aliases it.
	Value []byte
	// IDNamespace is what eventId is unique within, when it is not unique on
	// its own: a CloudEvent's source (CloudEvents 1.0: source + id identify
	// an event). "" for the other formats. See DedupEventID.
	IDNamespace string
	// Trace is the W3C trace context the record carries, if any.
	Trace TraceContext
	// SchemaID is the Schema Registry id the value was decoded with; 0 when
	// the value was not framed.
	SchemaID int
}

// DedupEventID is the event id the dedup key is made from
// (dedup.MakeID(ev.TenantID, res.DedupEventID(ev.EventID))): eventID
// itself, unchanged and without allocating, when IDNamespace is empty, so
// the envelope path keeps its dedup keys; otherwise an injective encoding
// of (IDNamespace, eventID): the namespace's length, ':', the namespace,
// the id. Within one topic every record has the same format, so the two
// spellings never meet in one dedup scope.
func (r *Result) DedupEventID(eventID string) string {
	if r.IDNamespace == "" {
		return eventID
	}
	return r.namespaced(eventID)
}

func (r *Result) namespaced(eventID string) string {
	return strconv.Itoa(len(r.IDNamespace)) + ":" + r.IDNamespace + eventID
}

// Decode turns one record into an event envelope in *res, appending it to
// dst for every format but the envelope one. res is overwritten, and
// zeroed when an error is returned (the form of envelope.DecodeInto: no
// result is copied on the envelope path). The errors:
//   - *envelope.Error: the record is invalid (dead letter with its Reason,
//     invalid:<member> or invalid:value); envelope.DecodeInto then applies
//     the envelope's own rules to res.Value;
//   - an error wrapping ErrUnavailable: retry later;
//   - ctx's error.
func (d *Decoder) Decode(ctx context.Context, rec *kgo.Record, dst []byte, res *Result) error {
	if d.passThrough {
		// The envelope format: no copy, no validation beyond DecodeInto's.
		res.Value, res.IDNamespace, res.SchemaID, res.Trace = rec.Value, "", 0, TraceContext{}
		if len(rec.Headers) != 0 {
			res.Trace = traceFromHeaders(rec.Headers)
		}
		return nil
	}
	*res = Result{}
	if err := d.decode(ctx, rec, dst, res); err != nil {
		*res = Result{}
		return err
	}
	return nil
}

// decode is Decode for the formats other than envelope.
func (d *Decoder) decode(ctx context.Context, rec *kgo.Record, dst []byte, res *Result) error {
	if len(rec.Value) > d.maxBytes {
		return &envelope.Error{Field: "value", Msg: fmt.Sprintf("too large: %d bytes exceeds the limit of %d", len(rec.Value), d.maxBytes)}
	}
	v := view{d: d, ctx: ctx, rec: rec}
	var err error
	switch d.format {
	case CloudEvents:
		err = v.openCloudEvent(res)
	case DebeziumOutbox:
		err = v.openDebezium(res)
	default: // Mapped
		err = v.openMapped(res)
	}
	if err != nil {
		return err
	}
	// A traceparent header is the context of the hop that produced the
	// record (what OpenTelemetry's Kafka instrumentations set); it wins
	// over the CloudEvents extension, the context the event was created in.
	if t := traceFromHeaders(rec.Headers); !t.IsZero() {
		res.Trace = t
	}
	if dst == nil { // one allocation for the envelope, whatever it holds
		dst = make([]byte, 0, len(v.doc)+len(v.data)+512)
	}
	res.Value, err = v.build(dst)
	return err
}

// Prepare fetches the schemas the records' framed values (and keys, where
// a member comes from the key) need, so that Decode inside a transaction
// finds them cached. It returns the first error wrapping ErrUnavailable;
// records that can never decode are left for Decode to reject.
func (d *Decoder) Prepare(ctx context.Context, recs []*kgo.Record) error {
	if d.passThrough || d.schemas == nil {
		return nil
	}
	for _, r := range recs {
		if err := d.prefetch(ctx, r.Value); err != nil {
			return err
		}
		if d.usesKey {
			if err := d.prefetch(ctx, r.Key); err != nil {
				return err
			}
		}
	}
	return nil
}

// prefetch fetches the schema of b when it is framed; only an error after
// which b might still decode is returned.
func (d *Decoder) prefetch(ctx context.Context, b []byte) error {
	id, ok := framedID(b)
	if !ok {
		return nil
	}
	if err := d.schemas.Prefetch(ctx, id); err != nil && !isInvalid(err) {
		return err
	}
	return nil
}

// framedID reports whether b starts with the Confluent wire header (magic
// byte 0, a 4-byte big-endian schema id). No JSON text starts with a zero
// byte, so a framed value is never mistaken for JSON or the reverse.
func framedID(b []byte) (int, bool) {
	if len(b) < 5 || b[0] != 0 {
		return 0, false
	}
	return int(binary.BigEndian.Uint32(b[1:5])), true
}

func isInvalid(err error) bool {
	var ie *schemaregistry.InvalidError
	return errors.As(err, &ie)
}

// decodeFramed decodes a framed value or key into JSON. An error that can
// never go away becomes invalid:<field>, naming the schema id.
func (v *view) decodeFramed(b []byte, id int, field string) ([]byte, error) {
	if v.d.schemas == nil {
		return nil, &envelope.Error{Field: field, Msg: fmt.Sprintf("Schema Registry framed (schema id %d), but no schema registry is configured", id)}
	}
	out, err := v.d.schemas.Decode(v.ctx, b, nil, v.d.maxBytes)
	if err != nil {
		var ie *schemaregistry.InvalidError
		if errors.As(err, &ie) {
			return nil, &envelope.Error{Field: field, Msg: ie.Error()}
		}
		return nil, err
	}
	return out, nil
}

// view is one record being decoded: where each source resolves.
type view struct {
	d   *Decoder
	ctx context.Context
	rec *kgo.Record

	doc  []byte // the JSON document pointers resolve in; nil: none
	root span
	top  topIndex // the members of doc's top-level object, when it is one

	ce       bool   // a CloudEvent: pointers resolve through resolveCloudEvent
	ceBinary bool   // CloudEvents binary mode: attributes are ce_ headers, "/data…" resolves in data
	data     []byte // CloudEvents: the data as a JSON document; nil: none
	dataRoot span
	dataErr  string // CloudEvents: why the data cannot be pointed into ("" if it can)

	keyDone bool
	key     value
	keyErr  error
}

// value is what a source resolved to.
type value struct {
	kind   kind   // kindNone: absent
	b      []byte // the raw JSON token, or the text when text is set
	text   bool   // b is text (a header, the key), not JSON
	quoted bool   // text that may be a JSON string literal, as Kafka Connect's JSON converters write strings
}

// setDoc makes b (a record value, or what it decoded to) the document,
// after checking it is JSON of bounded depth.
func (v *view) setDoc(b []byte, what string) error {
	if msg := checkJSON(b, envelope.MaxDepth); msg != "" {
		return &envelope.Error{Field: "value", Msg: what + ": " + msg}
	}
	v.doc, v.root = b, rootSpan(b)
	return nil
}

// openValue makes the record value the document, decoding it first when
// it is framed.
func (v *view) openValue(res *Result, what string) error {
	b := v.rec.Value
	if id, ok := framedID(b); ok {
		var err error
		if b, err = v.decodeFramed(b, id, "value"); err != nil {
			return err
		}
		res.SchemaID = id
		what += fmt.Sprintf(" (decoded with schema %d)", id)
	}
	return v.setDoc(b, what)
}

func (v *view) openMapped(res *Result) error {
	if len(v.rec.Value) == 0 {
		return &envelope.Error{Field: "value", Msg: "not JSON: empty"}
	}
	if err := v.openValue(res, "value"); err != nil {
		return err
	}
	if v.root.kind != kindObject {
		return &envelope.Error{Field: "value", Msg: "must be a JSON object, got " + v.root.kind.String()}
	}
	return nil
}

// resolve finds member m's value.
func (v *view) resolve(m member) (value, error) {
	src := &v.d.fields[m]
	switch src.kind {
	case srcKey:
		return v.keyValue(m)
	case srcHeader:
		if h, ok := lastHeader(v.rec.Headers, src.header); ok {
			return value{kind: kindString, b: h, text: true, quoted: true}, nil
		}
		return value{}, nil
	case srcPointer:
		if v.ce {
			return v.resolveCloudEvent(m, src.ptr.tokens)
		}
		return v.lookupDoc(m, v.doc, v.root, src.ptr.tokens)
	}
	return value{}, nil
}

func (v *view) lookupDoc(m member, doc []byte, root span, tokens []string) (value, error) {
	if doc == nil {
		return value{}, nil
	}
	var at span
	var msg string
	if len(tokens) > 0 && len(v.doc) > 0 && &doc[0] == &v.doc[0] && root == v.root {
		at, msg = v.lookupTop(tokens)
	} else {
		at, msg = lookup(doc, root, tokens)
	}
	if msg != "" {
		return value{}, &envelope.Error{Field: m.String(), Msg: msg + " on the way to " + v.describe(m)}
	}
	if at.kind == kindNone {
		return value{}, nil
	}
	return value{kind: at.kind, b: doc[at.start:at.end]}, nil
}

// lookupTop is lookup from the document's root, its first step through
// the top-level index.
func (v *view) lookupTop(tokens []string) (span, string) {
	if v.root.kind != kindObject {
		return lookup(v.doc, v.root, tokens)
	}
	if !v.top.built {
		v.top.build(v.doc, v.root)
	}
	if v.top.overflow {
		return lookup(v.doc, v.root, tokens)
	}
	at, dup := v.top.find(v.doc, tokens[0])
	if dup {
		return span{}, "member " + strconv.Quote(tokens[0]) + " occurs twice"
	}
	if at.kind == kindNone {
		return at, ""
	}
	return lookup(v.doc, at, tokens[1:])
}

// keyValue resolves the record key: decoded when framed, else text that
// may be a JSON string literal ("1" for 1, as Debezium's key converter
// writes a string key).
func (v *view) keyValue(m member) (value, error) {
	if !v.keyDone {
		v.keyDone = true
		k := v.rec.Key
		if id, ok := framedID(k); ok {
			var b []byte
			if b, v.keyErr = v.decodeFramed(k, id, m.String()); v.keyErr == nil {
				if msg := checkJSON(b, envelope.MaxDepth); msg != "" {
					v.keyErr = &envelope.Error{Field: m.String(), Msg: fmt.Sprintf("key decoded with schema %d: %s", id, msg)}
				} else {
					r := rootSpan(b)
					v.key = value{kind: r.kind, b: b[r.start:r.end]}
				}
			}
		} else if k != nil {
			v.key = value{kind: kindString, b: k, text: true, quoted: true}
		}
	}
	return v.key, v.keyErr
}

// lastHeader is the value of the last header named name: Kafka allows a
// name more than once, and Kafka Connect (Debezium) reads the last.
func lastHeader(hs []kgo.RecordHeader, name string) ([]byte, bool) {
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i].Key == name {
			v := hs[i].Value
			if v == nil {
				v = []byte{}
			}
			return v, true
		}
	}
	return nil, false
}

// describe names where member m comes from, for messages.
func (v *view) describe(m member) string {
	src := &v.d.fields[m]
	switch src.kind {
	case srcKey:
		return "the record key"
	case srcHeader:
		return "header " + strconv.Quote(src.header)
	}
	t := src.ptr.tokens
	if v.ceBinary && len(t) == 1 && t[0] != "data" {
		return "header " + strconv.Quote(ceHeaderPrefix+t[0])
	}
	return "JSON pointer " + strconv.Quote(src.ptr.text)
}
