package inputformat

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/extensions"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The CloudEvents records of these tests are made by the CloudEvents Go SDK
// (github.com/cloudevents/sdk-go/v2): the event with its event package, the
// Kafka message with its own Kafka protocol binding writer,
// kafka_sarama.WriteProducerMessage, which fills a sarama ProducerMessage
// (no broker involved) in binary mode (binding.WithForceBinary: ce_
// headers, content-type, the data as the value) or structured mode
// (binding.WithForceStructured: content-type application/cloudevents+json,
// the event in the SDK's JSON format). Only the header list is copied from
// sarama's type into kgo's; nothing of the encoding is ours.

const (
	ceTraceParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ceTraceState  = "congo=t61rcWkgMzE"
)

// newCE is the test's CloudEvent: every attribute the defaults map.
func newCE(t testing.TB, data any) event.Event {
	t.Helper()
	e := event.New()
	e.SetID("inv-1")
	e.SetSource("/billing/eu")
	e.SetType("InvoiceIssued")
	e.SetSubject("INV-1")
	e.SetTime(time.Date(2026, 6, 28, 10, 15, 30, 123e6, time.UTC))
	e.SetExtension("sequence", "1")
	e.SetExtension("tenantid", "acme")
	if data != nil {
		if err := e.SetData("application/json", data); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// ceRecord is e as the SDK's Kafka binding writes it.
func ceRecord(t testing.TB, e event.Event, structured bool) *kgo.Record {
	t.Helper()
	ctx := binding.WithForceBinary(context.Background())
	if structured {
		ctx = binding.WithForceStructured(context.Background())
	}
	var pm sarama.ProducerMessage
	if err := kafka_sarama.WriteProducerMessage(ctx, binding.ToMessage(&e), &pm); err != nil {
		t.Fatal(err)
	}
	r := &kgo.Record{}
	if pm.Value != nil {
		r.Value, _ = pm.Value.Encode()
	}
	if pm.Key != nil {
		r.Key, _ = pm.Key.Encode()
	}
	for _, h := range pm.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: string(h.Key), Value: h.Value})
	}
	return r
}

func header(r *kgo.Record, name string) string {
	v, _ := lastHeader(r.Headers, name)
	return string(v)
}

func TestCloudEventsStory(t *testing.T) {
	d := mustNew(t, Options{Format: CloudEvents})
	data := map[string]any{"amount": 10, "currency": "EUR", "lines": []any{"a"}}
	e := newCE(t, data)
	binary, structured := ceRecord(t, e, false), ceRecord(t, e, true)
	if header(binary, "ce_id") != "inv-1" || header(binary, "content-type") != "application/json" {
		t.Fatalf("the SDK's binary mode: headers %v", binary.Headers)
	}
	if header(structured, "content-type") != "application/cloudevents+json" || header(structured, "ce_id") != "" {
		t.Fatalf("the SDK's structured mode: headers %v", structured.Headers)
	}
	// Other member order, an escape and 10.0 for 10 (json.RawMessage: the
	// SDK writes it inline, compacted, in structured mode; []byte would go
	// to data_base64, tested below).
	reser := newCE(t, json.RawMessage("{ \"lines\": [\"\\u0061\"],\n  \"currency\": \"EUR\", \"amount\": 10.0 }"))
	reser.SetExtension("sequence", 1) // an integer extension: a JSON number in structured mode
	changed := newCE(t, map[string]any{"amount": 11, "currency": "EUR", "lines": []any{"a"}})
	base := checkStory(t, d, binary,
		map[string]*kgo.Record{
			"duplicate":                         ceRecord(t, e, false),
			"the same event in structured mode": structured,
			"re-serialised data, binary":        ceRecord(t, reser, false),
			"re-serialised data, structured":    ceRecord(t, reser, true),
		},
		ceRecord(t, changed, true))
	ev := base.ev
	if ev.EventID != "inv-1" || ev.EventType != "InvoiceIssued" || ev.AggregateID != "INV-1" || ev.AggregateVersion != 1 ||
		ev.OccurredAt != "2026-06-28T10:15:30.123Z" || ev.TenantID != "acme" || string(ev.Payload) != `{"amount":10,"currency":"EUR","lines":["a"]}` {
		t.Errorf("event %+v payload %s", ev, ev.Payload)
	}
	if base.res.IDNamespace != "/billing/eu" {
		t.Errorf("id namespace %q, want the source", base.res.IDNamespace)
	}

	// The dedup identity is (source, id): the same id from another source
	// is another event, in either mode.
	other := newCE(t, data)
	other.SetSource("/billing/us")
	for _, structured := range []bool{false, true} {
		if o := valid(t, d, ceRecord(t, other, structured)); o.dedupID() == base.dedupID() {
			t.Errorf("structured %v: the same id from another source has the same dedup key", structured)
		}
	}
}

func TestCloudEventsPoison(t *testing.T) {
	d := mustNew(t, Options{Format: CloudEvents})
	badSeq := newCE(t, map[string]any{"a": 1})
	badSeq.SetExtension("sequence", "first")
	badJSON := newCE(t, nil)
	if err := badJSON.SetData("application/json", []byte(`{"a":`)); err != nil {
		t.Fatal(err)
	}
	text := newCE(t, nil)
	if err := text.SetData("text/plain", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	noSubject := newCE(t, map[string]any{"a": 1})
	noSubject.SetSubject("")
	v03 := event.New(event.CloudEventsVersionV03)
	v03.SetID("x")
	v03.SetSource("/s")
	v03.SetType("T")
	cases := []poison{
		{"sequence not a decimal integer, binary", ceRecord(t, badSeq, false), "invalid:aggregateVersion", `must be a decimal integer, got "first" (header "ce_sequence")`},
		{"sequence not a decimal integer, structured", ceRecord(t, badSeq, true), "invalid:aggregateVersion", `(JSON pointer "/sequence")`},
		{"JSON data that is not JSON", ceRecord(t, badJSON, false), "invalid:value", "data: not JSON"},
		{"data that is not JSON", ceRecord(t, text, false), "invalid:payload", `the data has content-type "text/plain", not JSON (JSON pointer "/data")`},
		{"no subject, binary", ceRecord(t, noSubject, false), "invalid:aggregateId", `required field is missing: nothing at header "ce_subject"`},
		{"no subject, structured", ceRecord(t, noSubject, true), "invalid:aggregateId", `nothing at JSON pointer "/subject"`},
		{"CloudEvents 0.3, binary", ceRecord(t, v03, false), "invalid:value", `header ce_specversion "0.3": only CloudEvents 1.0 is supported`},
		{"CloudEvents 0.3, structured", ceRecord(t, v03, true), "invalid:value", `specversion "0.3": only CloudEvents 1.0`},
		{"not a CloudEvent", record("k", `{"id":"x"}`), "invalid:value", "not a CloudEvent"},
		{"a batch", record("k", `[]`, "content-type", "application/cloudevents-batch+json"), "invalid:value", "no batches"},
		{"structured, not an object", record("k", `"x"`, "content-type", "application/cloudevents+json"), "invalid:value", "must be a JSON object"},
		{"structured, no source", record("k", `{"specversion":"1.0","id":"x","type":"T","subject":"s"}`, "content-type", "application/cloudevents+json"), "invalid:value", "required CloudEvents attribute source is missing"},
		{"binary, no source", record("k", `{}`, "ce_specversion", "1.0", "ce_id", "x", "ce_type", "T", "ce_subject", "s"), "invalid:value", "(header ce_source)"},
	}
	checkPoison(t, d, cases)
}

// TestCloudEventsFields: defaults overridden, the data in data_base64, an
// event without data.
func TestCloudEventsFields(t *testing.T) {
	d := mustNew(t, Options{Format: CloudEvents, Fields: map[string]string{
		"aggregateId": "/data/invoice/no", "aggregateType": "/aggregatetype", "aggregateVersion": "header:rev", "payload": "/data/invoice",
	}})
	e := newCE(t, map[string]any{"invoice": map[string]any{"no": "INV-9", "amount": 3}})
	e.SetExtension("aggregatetype", "Invoice")
	for _, structured := range []bool{false, true} {
		r := ceRecord(t, e, structured)
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "rev", Value: []byte("4")})
		o := valid(t, d, r)
		if o.ev.AggregateID != "INV-9" || o.ev.AggregateType != "Invoice" || o.ev.AggregateVersion != 4 || string(o.ev.Payload) != `{"amount":3,"no":"INV-9"}` {
			t.Errorf("structured %v: event %+v payload %s", structured, o.ev, o.ev.Payload)
		}
	}

	plain := mustNew(t, Options{Format: CloudEvents})
	// The JSON event format carries binary data in data_base64.
	b64 := newCE(t, nil)
	if err := b64.SetData("application/json", []byte(`{"amount":10}`)); err != nil {
		t.Fatal(err)
	}
	b64.DataBase64 = true
	o := valid(t, plain, ceRecord(t, b64, true))
	if string(o.ev.Payload) != `{"amount":10}` {
		t.Errorf("data_base64: payload %s (value %s)", o.ev.Payload, ceRecord(t, b64, true).Value)
	}
	for _, structured := range []bool{false, true} {
		if o := valid(t, plain, ceRecord(t, newCE(t, nil), structured)); o.ev.Payload != nil {
			t.Errorf("structured %v, no data: payload %s", structured, o.ev.Payload)
		}
	}
}

// TestCloudEventsTraceContext: the distributed-tracing extension in either
// mode; a traceparent header wins over it; an invalid one is ignored.
func TestCloudEventsTraceContext(t *testing.T) {
	d := mustNew(t, Options{Format: CloudEvents})
	e := newCE(t, map[string]any{"a": 1})
	extensions.DistributedTracingExtension{TraceParent: ceTraceParent, TraceState: ceTraceState}.AddTracingAttributes(&e)
	for _, structured := range []bool{false, true} {
		r := ceRecord(t, e, structured)
		o := valid(t, d, r)
		if string(o.res.Trace.Parent) != ceTraceParent || string(o.res.Trace.State) != ceTraceState {
			t.Errorf("structured %v: trace %q %q", structured, o.res.Trace.Parent, o.res.Trace.State)
		}
		hop := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte(hop)})
		if o := valid(t, d, r); string(o.res.Trace.Parent) != hop || o.res.Trace.State != nil {
			t.Errorf("structured %v: the traceparent header did not win: %q", structured, o.res.Trace.Parent)
		}
	}
	bad := newCE(t, map[string]any{"a": 1})
	extensions.DistributedTracingExtension{TraceParent: "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}.AddTracingAttributes(&bad)
	if o := valid(t, d, ceRecord(t, bad, false)); !o.res.Trace.IsZero() {
		t.Errorf("an all-zero trace id was taken: %q", o.res.Trace.Parent)
	}
}
