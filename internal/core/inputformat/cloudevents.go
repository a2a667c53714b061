package inputformat

import (
	"encoding/base64"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/envelope"
)

// The CloudEvents Kafka protocol binding (cloudevents/spec,
// kafka-protocol-binding.md): in binary mode every attribute is a header
// named ce_<attribute> and the value is the data, typed by the content-type
// header; in structured mode the content-type is
// application/cloudevents+json and the value is the whole event in the JSON
// event format.
const (
	ceHeaderPrefix   = "ce_"
	ceContentType    = "content-type"
	ceStructuredJSON = "application/cloudevents+json"
)

func invalidValue(msg string) error { return &envelope.Error{Field: "value", Msg: msg} }

// openCloudEvent opens a CloudEvent in either mode. It checks what makes it
// a CloudEvents 1.0 event projector can identify (specversion, source) and
// takes the trace context of the distributed-tracing extension when no
// traceparent header is present; the members come from the attributes
// through the fields.
func (v *view) openCloudEvent(res *Result) error {
	v.ce = true
	ct, _ := lastHeaderFold(v.rec.Headers, ceContentType)
	mt := mediaType(ct)
	if mt == ceStructuredJSON {
		return v.openStructured(res)
	}
	if spec, ok := lastHeader(v.rec.Headers, ceHeaderPrefix+"specversion"); ok {
		return v.openBinary(res, spec, mt)
	}
	if strings.HasPrefix(mt, "application/cloudevents") {
		return invalidValue("content-type " + strconv.Quote(mt) + ": a CloudEvent on Kafka is application/cloudevents+json or binary mode (no batches)")
	}
	return invalidValue("not a CloudEvent: no ce_specversion header (binary mode) and the content-type is not application/cloudevents+json (structured mode)")
}

func (v *view) openBinary(res *Result, spec []byte, mt string) error {
	v.ceBinary = true
	if string(spec) != "1.0" {
		return invalidValue("header ce_specversion " + strconv.Quote(string(spec)) + ": only CloudEvents 1.0 is supported")
	}
	src, ok := lastHeader(v.rec.Headers, ceHeaderPrefix+"source")
	if !ok || len(src) == 0 {
		return invalidValue("required CloudEvents attribute source is missing (header ce_source): an event is identified by source and id")
	}
	res.IDNamespace = string(src)
	if tp, ok := lastHeader(v.rec.Headers, ceHeaderPrefix+"traceparent"); ok {
		ts, _ := lastHeader(v.rec.Headers, ceHeaderPrefix+"tracestate")
		res.Trace = newTraceContext(tp, ts)
	}
	b := v.rec.Value
	switch id, framed := framedID(b); {
	case len(b) == 0: // an event without data
	case framed:
		decoded, err := v.decodeFramed(b, id, "value")
		if err != nil {
			return err
		}
		res.SchemaID = id
		return v.setData(decoded, "data (decoded with schema "+strconv.Itoa(id)+")")
	case isJSONMedia(mt):
		return v.setData(b, "data")
	default:
		v.dataErr = "the data has content-type " + strconv.Quote(mt) + ", not JSON"
	}
	return nil
}

func (v *view) setData(b []byte, what string) error {
	if msg := checkJSON(b, envelope.MaxDepth-1); msg != "" {
		return invalidValue(what + ": " + msg)
	}
	v.data, v.dataRoot = b, rootSpan(b)
	return nil
}

func (v *view) openStructured(res *Result) error {
	if err := v.setDoc(v.rec.Value, "structured CloudEvent"); err != nil {
		return err
	}
	if v.root.kind != kindObject {
		return invalidValue("structured CloudEvent must be a JSON object, got " + v.root.kind.String())
	}
	spec, err := v.attr("specversion")
	if err != nil {
		return err
	}
	if string(spec) != "1.0" {
		return invalidValue("specversion " + strconv.Quote(string(spec)) + ": only CloudEvents 1.0 is supported")
	}
	src, err := v.attr("source")
	if err != nil {
		return err
	}
	if len(src) == 0 {
		return invalidValue("required CloudEvents attribute source is missing: an event is identified by source and id")
	}
	res.IDNamespace = string(src)
	if tp, _ := v.attr("traceparent"); tp != nil {
		ts, _ := v.attr("tracestate")
		res.Trace = newTraceContext(tp, ts)
	}
	if at, _ := v.lookupTop([]string{"data"}); at.kind != kindNone {
		v.data, v.dataRoot = v.doc, at
		return nil
	}
	return v.openBase64Data()
}

// openBase64Data takes data_base64 (binary data in the JSON format) as the
// data when its datacontenttype is JSON.
func (v *view) openBase64Data() error {
	b64, err := v.attr("data_base64")
	if err != nil || b64 == nil {
		return err
	}
	ct, err := v.attr("datacontenttype")
	if err != nil {
		return err
	}
	if mt := mediaType(ct); !isJSONMedia(mt) {
		v.dataErr = "the data_base64 has datacontenttype " + strconv.Quote(mt) + ", not JSON"
		return nil
	}
	raw, derr := base64.StdEncoding.DecodeString(string(b64))
	if derr != nil {
		return invalidValue("data_base64: " + derr.Error())
	}
	return v.setData(raw, "data_base64")
}

// attr is a string attribute of a structured CloudEvent, unescaped; nil
// when absent or null.
func (v *view) attr(name string) ([]byte, error) {
	at, msg := v.lookupTop([]string{name})
	switch {
	case msg != "":
		return nil, invalidValue(msg)
	case at.kind == kindNone || at.kind == kindNull:
		return nil, nil
	case at.kind != kindString:
		return nil, invalidValue("CloudEvents attribute " + name + " must be a string, got " + at.kind.String())
	}
	s, ok := unescape(make([]byte, 0, at.end-at.start), v.doc[at.start:at.end])
	if !ok {
		return nil, invalidValue("CloudEvents attribute " + name + " contains an unpaired UTF-16 surrogate escape")
	}
	return s, nil
}

// resolveCloudEvent resolves a pointer into the event in its structured
// form: "/data…" into the data, any other first token an attribute (a
// ce_ header in binary mode).
func (v *view) resolveCloudEvent(m member, tokens []string) (value, error) {
	switch {
	case len(tokens) == 0:
		if v.ceBinary {
			return value{}, nil // the binary event as a whole is no JSON document
		}
		return v.lookupDoc(m, v.doc, v.root, nil)
	case tokens[0] == "data":
		if v.dataErr != "" {
			return value{}, &envelope.Error{Field: m.String(), Msg: v.dataErr + " (" + v.describe(m) + ")"}
		}
		return v.lookupDoc(m, v.data, v.dataRoot, tokens[1:])
	case v.ceBinary:
		if len(tokens) > 1 {
			return value{}, nil // attributes are strings: nothing below them
		}
		if h, ok := lastHeader(v.rec.Headers, ceHeaderPrefix+tokens[0]); ok {
			return value{kind: kindString, b: h, text: true}, nil
		}
		return value{}, nil
	}
	return v.lookupDoc(m, v.doc, v.root, tokens)
}

// lastHeaderFold is lastHeader with the name compared case-insensitively,
// for content-type, which HTTP habits capitalise.
func lastHeaderFold(hs []kgo.RecordHeader, name string) ([]byte, bool) {
	for i := len(hs) - 1; i >= 0; i-- {
		if strings.EqualFold(hs[i].Key, name) {
			return hs[i].Value, true
		}
	}
	return nil, false
}

// mediaType is a content type without its parameters, lower-cased.
func mediaType(ct []byte) string {
	s := string(ct)
	if i := strings.IndexByte(s, ';'); i >= 0 {
		s = s[:i]
	}
	return strings.ToLower(strings.TrimSpace(s))
}

// isJSONMedia reports whether data of media type mt is JSON; an absent
// content type is taken as JSON, as the JSON event format does.
func isJSONMedia(mt string) bool {
	return mt == "" || mt == "application/json" || mt == "text/json" || strings.HasSuffix(mt, "+json")
}
