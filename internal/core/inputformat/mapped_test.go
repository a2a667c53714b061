package inputformat

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/internal/harness/race"
)

const envelopeValue = `{"eventId":"e-1","eventType":"CaseOpened","aggregateId":"CASE-1","aggregateVersion":1,"payload":{"status":"OPEN"}}`

// TestEnvelopePassThrough: the envelope format hands the record value over
// as it is (the same bytes, not a copy), allocates nothing, leaves the
// dedup id unchanged and decodes exactly as a direct DecodeInto does.
func TestEnvelopePassThrough(t *testing.T) {
	d := mustNew(t, Options{})
	if d.Format() != Envelope {
		t.Fatalf("zero Options: format %q", d.Format())
	}
	r := record("CASE-1", envelopeValue)
	res, err := decodeRecord(d, context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if &res.Value[0] != &r.Value[0] || len(res.Value) != len(r.Value) {
		t.Fatal("the envelope value was copied")
	}
	if res.IDNamespace != "" || res.DedupEventID("e-1") != "e-1" || res.SchemaID != 0 {
		t.Fatalf("result %+v changes the dedup id", res)
	}
	for _, bad := range []string{``, `[]`, `{"eventId":"e"}`, "\x00\x00\x00\x00\x01{}", `{"eventId":"e","eventType":"T","aggregateId":"A","aggregateVersion":0}`} {
		res, err := decodeRecord(d, context.Background(), record("", bad))
		if err != nil {
			t.Fatalf("%q: Decode judged the envelope: %v", bad, err)
		}
		_, got := envelope.Decode(res.Value, 0)
		_, want := envelope.Decode([]byte(bad), 0)
		if got == nil || got.Error() != want.Error() {
			t.Errorf("%q: %v, want %v", bad, got, want)
		}
	}
	if !race.Enabled {
		tp := record("", envelopeValue, "traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		var res Result
		if n := testing.AllocsPerRun(100, func() {
			_ = d.Decode(context.Background(), tp, nil, &res)
			_ = res.DedupEventID("e-1")
		}); n != 0 {
			t.Errorf("%v allocations per envelope record, want 0", n)
		}
	}
}

// The example mapping.
var orderFields = map[string]string{"eventId": "/id", "eventType": "/type", "aggregateId": "/orderId", "aggregateVersion": "/seq", "payload": "/data"}

const orderJSON = `{"id":"e-1","type":"OrderPlaced","orderId":"o-1","seq":1,"data":{"total":10,"items":["a"]}}`

func TestMappedStory(t *testing.T) {
	d := mustNew(t, Options{Format: Mapped, Fields: orderFields})
	base := checkStory(t, d, record("o-1", orderJSON),
		map[string]*kgo.Record{
			"duplicate": record("o-1", orderJSON),
			// other member order, whitespace, escapes and number spellings
			"re-serialised": record("o-1", "{ \"data\": {\"items\": [\"\\u0061\"], \"total\": 10.0},\n \"seq\": 1e0, \"orderId\": \"o\\u002d1\", \"type\": \"OrderPlaced\", \"id\": \"e-1\", \"extra\": [1,2]}"),
		},
		record("o-1", `{"id":"e-1","type":"OrderPlaced","orderId":"o-1","seq":1,"data":{"total":11,"items":["a"]}}`))
	if got, want := string(base.res.Value), `{"eventId":"e-1","eventType":"OrderPlaced","aggregateId":"o-1","aggregateVersion":1,"payload":{"total":10,"items":["a"]}}`; got != want {
		t.Errorf("envelope\n got %s\nwant %s", got, want)
	}
	checkPoison(t, d, []poison{
		{"missing required member names the pointer", record("", `{"type":"T","orderId":"o","seq":1}`), "invalid:eventId", `required field is missing: nothing at JSON pointer "/id"`},
		{"null required member", record("", `{"id":null,"type":"T","orderId":"o"}`), "invalid:eventId", `nothing at JSON pointer "/id"`},
		{"wrong type", record("", `{"id":{"x":1},"type":"T","orderId":"o"}`), "invalid:eventId", `must be a string, got an object (JSON pointer "/id")`},
		{"fractional id", record("", `{"id":1.5,"type":"T","orderId":"o"}`), "invalid:eventId", "must be a string or an integer, got the number 1.5"},
		{"version not an integer", record("", `{"id":"e","type":"T","orderId":"o","seq":"x1"}`), "invalid:aggregateVersion", `must be a decimal integer, got "x1" (JSON pointer "/seq")`},
		{"version 0 (the envelope's rule)", record("", `{"id":"e","type":"T","orderId":"o","seq":0}`), "invalid:aggregateVersion", "must be >= 1"},
		{"version overflows", record("", `{"id":"e","type":"T","orderId":"o","seq":"99999999999999999999"}`), "invalid:aggregateVersion", "fits int64"},
		{"member twice on the path", record("", `{"id":"a","id":"b","type":"T","orderId":"o"}`), "invalid:eventId", `member "id" occurs twice on the way to JSON pointer "/id"`},
		{"empty id (the envelope's rule)", record("", `{"id":"","type":"T","orderId":"o"}`), "invalid:eventId", "must not be empty"},
		{"payload with a duplicate name (I-JSON)", record("", `{"id":"e","type":"T","orderId":"o","data":{"a":1,"a":2}}`), "invalid:payload", "duplicate"},
		{"not JSON", record("", `{"id":"e",`), "invalid:value", "not JSON"},
		{"trailing data", record("", `{"id":"e","type":"T","orderId":"o"} x`), "invalid:value", "data after the JSON value"},
		{"not an object", record("", `["e"]`), "invalid:value", "must be a JSON object, got an array"},
		{"empty", record("", ``), "invalid:value", "empty"},
		{"not UTF-8", record("", "{\"id\":\"\xff\"}"), "invalid:value", "UTF-8"},
		{"too deep", record("", `{"id":"e","type":"T","orderId":"o","data":`+strings.Repeat("[", 64)+strings.Repeat("]", 64)+`}`), "invalid:value", "nesting deeper than 64"},
		{"framed without a registry", record("", "\x00\x00\x00\x00\x07\x02"), "invalid:value", "schema id 7), but no schema registry is configured"},
	})
	big := mustNew(t, Options{Format: Mapped, Fields: orderFields, MaxRecordBytes: 64})
	checkPoison(t, big, []poison{{"too large", record("", orderJSON), "invalid:value", "too large: 91 bytes exceeds the limit of 64"}})
}

// TestMappedSources: pointers with escapes and array indexes, headers,
// the key (JSON-quoted or not), integers as ids, decimal strings as
// versions, every optional member.
func TestMappedSources(t *testing.T) {
	d := mustNew(t, Options{Format: Mapped, Fields: map[string]string{
		"eventId": "/meta/ids/1", "eventType": "header:type", "aggregateId": "key", "aggregateType": "/a~1b/c~0d",
		"aggregateVersion": "header:v", "tenantId": "/tenant", "occurredAt": "/at", "correlationId": "/corr",
		"causationId": "header:cause", "producer": "/p", "payload": "",
	}})
	r := record(`"K-\"1\""`, `{"meta":{"ids":["x",42]},"a/b":{"c~d":"Order"},"tenant":"acme","at":"2026-06-28T10:15:30Z","corr":"c1","p":null}`,
		"type", "OrderPlaced", "v", `"7"`, "cause", "ca\"use", "type", "OrderShipped")
	o := valid(t, d, r)
	want := `{"eventId":"42","eventType":"OrderShipped","aggregateId":"K-\"1\"","aggregateType":"Order","aggregateVersion":7,` +
		`"tenantId":"acme","occurredAt":"2026-06-28T10:15:30Z","correlationId":"c1","causationId":"ca\"use",` +
		`"payload":{"meta":{"ids":["x",42]},"a/b":{"c~d":"Order"},"tenant":"acme","at":"2026-06-28T10:15:30Z","corr":"c1","p":null}}`
	if string(o.res.Value) != want {
		t.Errorf("envelope\n got %s\nwant %s", o.res.Value, want)
	}
	if o.ev.AggregateID != `K-"1"` || o.ev.EventType != "OrderShipped" || o.ev.AggregateVersion != 7 {
		t.Errorf("event %+v", o.ev)
	}
	// An unquoted key is the key's text; a header that is not valid UTF-8 is rejected.
	if o := valid(t, d, record("K-1", `{"meta":{"ids":["x","y"]}}`, "type", "T")); o.ev.AggregateID != "K-1" {
		t.Errorf("plain key: %q", o.ev.AggregateID)
	}
	checkPoison(t, d, []poison{
		{"no key", record("", `{"meta":{"ids":["x","y"]}}`, "type", "T"), "invalid:aggregateId", "nothing at the record key"},
		{"no type header", record("k", `{"meta":{"ids":["x","y"]}}`), "invalid:eventType", `nothing at header "type"`},
		{"header not UTF-8", record("k", `{"meta":{"ids":["x","y"]}}`, "type", "\xff"), "invalid:eventType", `not valid UTF-8 (header "type")`},
		{"array index out of range", record("k", `{"meta":{"ids":["x"]}}`, "type", "T"), "invalid:eventId", `nothing at JSON pointer "/meta/ids/1"`},
		{"bad occurredAt (the envelope's rule)", record("k", `{"meta":{"ids":["x","y"]},"at":"yesterday"}`, "type", "T"), "invalid:occurredAt", "RFC 3339"},
	})
}

func TestOptionErrors(t *testing.T) {
	cases := []struct {
		o    Options
		want string
	}{
		{Options{Format: "avro"}, "inputformat: format: unknown format avro (envelope, cloudevents, debezium-outbox, mapped)"},
		{Options{Fields: map[string]string{"eventId": "/id"}}, "inputformat: fields: the envelope format takes no fields"},
		{Options{Format: Mapped, Fields: map[string]string{"eventId": "/id", "eventType": "/t"}}, "inputformat: fields.aggregateId: required: the mapped format needs to know where the aggregateId is"},
		{Options{Format: Mapped, Fields: map[string]string{"eventID": "/id"}}, "inputformat: fields.eventID: not an envelope member"},
		{Options{Format: CloudEvents, Fields: map[string]string{"aggregateId": "data.id"}}, "inputformat: fields.aggregateId: a JSON pointer must be empty or start with '/'"},
		{Options{Format: CloudEvents, Fields: map[string]string{"aggregateId": "/a~2"}}, "'~' must be followed by 0 or 1"},
		{Options{Format: DebeziumOutbox, Fields: map[string]string{"aggregateVersion": "header:"}}, "inputformat: fields.aggregateVersion: header: needs a header name"},
	}
	for _, c := range cases {
		_, err := New(c.o)
		var oe *OptionError
		if !errors.As(err, &oe) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an *OptionError containing %q", c.o, err, c.want)
		}
	}
}

// TestManyTopLevelMembers: past the index's 48 members the lookups scan;
// the answers are the same, duplicates included.
func TestManyTopLevelMembers(t *testing.T) {
	d := mustNew(t, Options{Format: Mapped, Fields: orderFields})
	var b strings.Builder
	b.WriteString("{")
	for i := range 60 {
		fmt.Fprintf(&b, `"m%d":%d,`, i, i)
	}
	head := b.String()
	o := valid(t, d, record("", head+`"id":"e-1","type":"T","orderId":"o-1","seq":2}`))
	if o.ev.EventID != "e-1" || o.ev.AggregateVersion != 2 {
		t.Errorf("event %+v", o.ev)
	}
	checkPoison(t, d, []poison{
		{"duplicate past the index", record("", head+`"id":"e-1","type":"T","orderId":"o-1","id":"e-2"}`), "invalid:eventId", `member "id" occurs twice`},
		{"duplicate within the index", record("", `{"id":"e-1","type":"T","orderId":"o-1","id":"e-2"}`), "invalid:eventId", `member "id" occurs twice`},
	})
}
