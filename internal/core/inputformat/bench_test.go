package inputformat

import (
	"context"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/projector-dev/projector/internal/core/envelope"
)

// One event, the envelope package's benchmark envelope (about 300 bytes),
// in every format, so that the benchmarks compare like with like:
// TestBenchRecordsAreOneEvent checks they all decode to its fingerprint.
const benchEnvelope = `{"eventId":"01JZ8X3M9Q4K7T2V5N6B8C0D1E","eventType":"CaseEscalated","aggregateId":"CASE-2026-000123",` +
	`"aggregateType":"RegulatoryCase","aggregateVersion":42,"tenantId":"acme-eu","occurredAt":"2026-06-28T10:15:30.123Z",` +
	`"payload":{"status":"ESCALATED","reasonCode":"SLA_BREACH","level":2,"assignee":{"team":"compliance","id":"u-981"}}}`

const (
	benchPayload = `{"status":"ESCALATED","reasonCode":"SLA_BREACH","level":2,"assignee":{"team":"compliance","id":"u-981"}}`
	// The mapped formats' shape of it.
	benchShape = `{"id":"01JZ8X3M9Q4K7T2V5N6B8C0D1E","type":"CaseEscalated","caseId":"CASE-2026-000123","caseType":"RegulatoryCase",` +
		`"version":42,"tenant":"acme-eu","at":"2026-06-28T10:15:30.123Z","data":` + benchPayload + `}`
	benchAvro = `{"type":"record","name":"Case","fields":[
		{"name":"id","type":"string"},{"name":"type","type":"string"},{"name":"caseId","type":"string"},{"name":"caseType","type":"string"},
		{"name":"version","type":"long"},{"name":"tenant","type":"string"},{"name":"at","type":"string"},
		{"name":"data","type":{"type":"record","name":"Data","fields":[{"name":"status","type":"string"},{"name":"reasonCode","type":"string"},
			{"name":"level","type":"int"},{"name":"assignee","type":{"type":"record","name":"Assignee","fields":[{"name":"team","type":"string"},{"name":"id","type":"string"}]}}]}}]}`
	benchProto = `syntax = "proto3";
message Assignee { string team = 1; string id = 2; }
message Data { string status = 1; string reason_code = 2; int32 level = 3; Assignee assignee = 4; }
message Case { string id = 1; string type = 2; string case_id = 3; string case_type = 4; int64 version = 5; string tenant = 6; string at = 7; Data data = 8; }
`
)

var benchShapeFields = map[string]string{
	"eventId": "/id", "eventType": "/type", "aggregateId": "/caseId", "aggregateType": "/caseType",
	"aggregateVersion": "/version", "tenantId": "/tenant", "occurredAt": "/at", "payload": "/data",
}

type benchCase struct {
	name string
	d    *Decoder
	rec  *kgo.Record
}

// benchCases builds the records; the registry ones need reg.
func benchCases(tb testing.TB, reg *srfake.Registry) []benchCase {
	tb.Helper()
	e := event.New()
	e.SetID("01JZ8X3M9Q4K7T2V5N6B8C0D1E")
	e.SetSource("/cases")
	e.SetType("CaseEscalated")
	e.SetSubject("CASE-2026-000123")
	e.SetTime(time.Date(2026, 6, 28, 10, 15, 30, 123e6, time.UTC))
	e.SetExtension("sequence", "42")
	e.SetExtension("tenantid", "acme-eu")
	e.SetExtension("aggregatetype", "RegulatoryCase")
	if err := e.SetData("application/json", []byte(benchPayload)); err != nil {
		tb.Fatal(err)
	}
	e.DataBase64 = false
	ce := mustNew(tb, Options{Format: CloudEvents, Fields: map[string]string{"aggregateType": "/aggregatetype"}})
	dbz := mustNew(tb, Options{Format: DebeziumOutbox, Fields: map[string]string{
		"aggregateType": "header:aggregateType", "aggregateVersion": "header:version", "tenantId": "header:tenant", "occurredAt": "header:at",
	}})
	dbzHeaders := []string{"id", "01JZ8X3M9Q4K7T2V5N6B8C0D1E", "eventType", "CaseEscalated", "aggregateType", "RegulatoryCase",
		"version", "42", "tenant", "acme-eu", "at", "2026-06-28T10:15:30.123Z"}
	quoted, _ := jsonQuote(benchPayload)

	reg.SeedSchema("case-avro-value", 1, 1, sr.Schema{Schema: benchAvro, Type: sr.TypeAvro})
	reg.SeedSchema("case-proto-value", 1, 2, sr.Schema{Schema: benchProto, Type: sr.TypeProtobuf})
	reg.SeedSchema("case-json-value", 1, 3, sr.Schema{Schema: `{"type":"object"}`, Type: sr.TypeJSON})
	registry := mustNew(tb, Options{Format: Mapped, Fields: benchShapeFields, Schemas: newSchemas(tb, reg.URL())})
	avroRec := record("CASE-2026-000123", string(avroValue(tb, 1, benchAvro, map[string]any{
		"id": "01JZ8X3M9Q4K7T2V5N6B8C0D1E", "type": "CaseEscalated", "caseId": "CASE-2026-000123", "caseType": "RegulatoryCase",
		"version": int64(42), "tenant": "acme-eu", "at": "2026-06-28T10:15:30.123Z",
		"data": map[string]any{"status": "ESCALATED", "reasonCode": "SLA_BREACH", "level": 2, "assignee": map[string]any{"team": "compliance", "id": "u-981"}},
	})))
	return []benchCase{
		{"envelope", mustNew(tb, Options{}), record("CASE-2026-000123", benchEnvelope)},
		{"cloudevents-binary", ce, ceRecord(tb, e, false)},
		{"cloudevents-structured", ce, ceRecord(tb, e, true)},
		{"debezium-string", dbz, record(`"CASE-2026-000123"`, quoted, dbzHeaders...)},
		{"debezium-object", dbz, record(`"CASE-2026-000123"`, benchPayload, dbzHeaders...)},
		{"mapped", mustNew(tb, Options{Format: Mapped, Fields: benchShapeFields}), record("CASE-2026-000123", benchShape)},
		{"avro", registry, avroRec},
		{"protobuf", registry, record("CASE-2026-000123", string(protoValue(tb, 2, benchProto, "Case", benchShape)))},
		{"jsonschema", registry, record("CASE-2026-000123", string(framed(3, nil, []byte(benchShape))))},
	}
}

func TestBenchRecordsAreOneEvent(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	want, err := envelope.Decode([]byte(benchEnvelope), 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range benchCases(t, reg) {
		o := valid(t, c.d, c.rec)
		if o.ev.Fingerprint() != want.Fingerprint() || o.ev.EventID != want.EventID || o.ev.OccurredAt != want.OccurredAt {
			t.Errorf("%s: %s is not the benchmark event", c.name, o.res.Value)
		}
	}
}

// BenchmarkDecode is the decode cost per format: Decode, then
// envelope.DecodeInto of its result, as the processor will call them (the
// registry formats with the schema cached). envelope-direct is today's
// path, DecodeInto alone, for comparison with the envelope pass-through.
func BenchmarkDecode(b *testing.B) {
	reg := srfake.New()
	defer reg.Close()
	ctx := context.Background()
	b.Run("envelope-direct", func(b *testing.B) {
		value := []byte(benchEnvelope)
		b.ReportAllocs()
		var ev envelope.Event
		for b.Loop() {
			if err := envelope.DecodeInto(value, 0, &ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, c := range benchCases(b, reg) {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var ev envelope.Event
			var res Result
			for b.Loop() {
				if err := c.d.Decode(ctx, c.rec, nil, &res); err != nil {
					b.Fatal(err)
				}
				if err := envelope.DecodeInto(res.Value, 0, &ev); err != nil {
					b.Fatal(err)
				}
				_ = res.DedupEventID(ev.EventID)
			}
		})
	}
}

// BenchmarkEnvelopePath is the envelope path alone, without the other
// formats' set-up, so that instruction counts (callgrind, two -benchtime
// Nx runs) isolate it: today's DecodeInto against Decode's pass-through
// followed by DecodeInto and the dedup id, with and without a traceparent
// header to validate.
func BenchmarkEnvelopePath(b *testing.B) {
	d := mustNew(b, Options{})
	ctx := context.Background()
	plain := record("CASE-2026-000123", benchEnvelope)
	traced := record("CASE-2026-000123", benchEnvelope, "traceparent", ceTraceParent)
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		var ev envelope.Event
		for b.Loop() {
			if err := envelope.DecodeInto(plain.Value, 0, &ev); err != nil {
				b.Fatal(err)
			}
		}
	})
	for name, r := range map[string]*kgo.Record{"passthrough": plain, "passthrough-traceparent": traced} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			var ev envelope.Event
			var res Result
			for b.Loop() {
				if err := d.Decode(ctx, r, nil, &res); err != nil {
					b.Fatal(err)
				}
				if err := envelope.DecodeInto(res.Value, 0, &ev); err != nil {
					b.Fatal(err)
				}
				_ = res.DedupEventID(ev.EventID)
			}
		})
	}
}
