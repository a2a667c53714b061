package inputformat

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The fixtures are the record shapes of Debezium's Outbox Event Router
// documentation, https://debezium.io/documentation/reference/3.4/transformations/outbox-event-router.html
// (source: debezium/debezium, documentation/modules/ROOT/pages/transformations/outbox-event-router.adoc):
//
//   - "Example outbox message": topic outbox.event.order, key "1" (the
//     aggregateid column, JSON-quoted by the JSON converter), header
//     id=4d47e190-0402-4048-bc2c-89dd54343cdc (table.field.event.id), and
//     the payload column as the value: a JSON string holding the JSON,
//     because the payload is not expanded by default;
//   - "Expanding escaped JSON String as JSON": the same message with
//     table.expand.json.payload=true, the value the JSON object itself;
//   - "Emitting messages with additional fields": a column placed in a
//     header; the default is the type column placed as header
//     eventType (table.fields.additional.placement=type:header:eventType).
const (
	dbzKey     = `"1"`
	dbzEventID = "4d47e190-0402-4048-bc2c-89dd54343cdc"
	// The documented payload, not expanded.
	dbzStringPayload = `"{\"id\": 1, \"lineItems\": [{\"id\": 1, \"item\": \"Debezium in Action\", \"status\": \"ENTERED\", \"quantity\": 2, \"totalPrice\": 39.98}, {\"id\": 2, \"item\": \"Debezium for Dummies\", \"status\": \"ENTERED\", \"quantity\": 1, \"totalPrice\": 29.99}], \"orderDate\": \"2019-01-31T12:13:01\", \"customerId\": 123}"`
	// The documented payload, expanded.
	dbzObjectPayload = `{
  "id": 1, "lineItems": [{"id": 1, "item": "Debezium in Action", "status": "ENTERED", "quantity": 2, "totalPrice": 39.98}, {"id": 2, "item": "Debezium for Dummies", "status": "ENTERED", "quantity": 1, "totalPrice": 29.99}], "orderDate": "2019-01-31T12:13:01", "customerId": 123
}`
)

func dbzRecord(value string, headers ...string) *kgo.Record {
	return record(dbzKey, value, append([]string{"id", dbzEventID, "eventType", "OrderCreated"}, headers...)...)
}

// TestDebeziumOutboxStory: both payload shapes of the documented message
// are the same event (a duplicate, not a conflict), a changed payload is a
// conflict, and the poison records get their reasons.
func TestDebeziumOutboxStory(t *testing.T) {
	d := mustNew(t, Options{Format: DebeziumOutbox})
	base := checkStory(t, d, dbzRecord(dbzStringPayload),
		map[string]*kgo.Record{
			"duplicate":                  dbzRecord(dbzStringPayload),
			"expanded (the other shape)": dbzRecord(dbzObjectPayload),
		},
		dbzRecord(`{"id": 1, "lineItems": [], "orderDate": "2019-01-31T12:13:01", "customerId": 123}`))
	ev := base.ev
	if ev.EventID != dbzEventID || ev.AggregateID != "1" || ev.EventType != "OrderCreated" || ev.AggregateVersion != 0 {
		t.Errorf("event %+v", ev)
	}
	if want := `{"id": 1, "lineItems": [{"id": 1, "item": "Debezium in Action", "status": "ENTERED", "quantity": 2, "totalPrice": 39.98}, {"id": 2, "item": "Debezium for Dummies", "status": "ENTERED", "quantity": 1, "totalPrice": 29.99}], "orderDate": "2019-01-31T12:13:01", "customerId": 123}`; string(ev.Payload) != want {
		t.Errorf("payload %s", ev.Payload)
	}
	checkPoison(t, d, []poison{
		{"no id header", record(dbzKey, dbzObjectPayload, "eventType", "OrderCreated"), "invalid:eventId", `required field is missing: nothing at header "id"`},
		{"no eventType header", record(dbzKey, dbzObjectPayload, "id", dbzEventID), "invalid:eventType", `nothing at header "eventType"`},
		{"no key", record("", dbzObjectPayload, "id", dbzEventID, "eventType", "OrderCreated"), "invalid:aggregateId", "nothing at the record key"},
		{"value not JSON", dbzRecord(`{"id": 1`), "invalid:value", "not JSON"},
		{"payload with a duplicate name (I-JSON)", dbzRecord(`"{\"a\":1,\"a\":2}"`), "invalid:payload", "duplicate"},
	})
}

// TestDebeziumOutboxShapes: what else the router emits.
func TestDebeziumOutboxShapes(t *testing.T) {
	d := mustNew(t, Options{Format: DebeziumOutbox})
	for _, c := range []struct {
		name, value, payload string
	}{
		// "If no content found or in case of parsing error, the content is kept as is."
		{"a string payload that is not JSON stays a string", `"hello"`, `"hello"`},
		{"a string holding a JSON scalar stays a string", `"123"`, `"123"`},
		{"a string holding broken JSON stays a string", `"{\"a\":"`, `"{\"a\":"`},
		{"an array payload, not expanded", `"[1, 2]"`, `[1, 2]`},
		{"no payload (an empty value)", ``, ``},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := valid(t, d, dbzRecord(c.value))
			if string(o.ev.Payload) != c.payload {
				t.Errorf("payload %s, want %s", o.ev.Payload, c.payload)
			}
		})
	}
	// The key as the string converter writes it, unquoted; the event id and
	// type headers as Kafka Connect's JSON header converter writes them.
	o := valid(t, d, record("order-7", `{}`, "id", `"`+dbzEventID+`"`, "eventType", `"OrderCreated"`))
	if o.ev.AggregateID != "order-7" || o.ev.EventID != dbzEventID || o.ev.EventType != "OrderCreated" {
		t.Errorf("event %+v", o.ev)
	}
}

// TestDebeziumOutboxOverrides: the type header renamed (placement
// type:header:type) and the optional version header.
func TestDebeziumOutboxOverrides(t *testing.T) {
	d := mustNew(t, Options{Format: DebeziumOutbox, Fields: map[string]string{
		"eventType": "header:type", "aggregateVersion": "header:version", "aggregateType": "header:aggregatetype",
	}})
	o := valid(t, d, record(dbzKey, dbzObjectPayload, "id", dbzEventID, "type", "OrderCreated", "version", "3", "aggregatetype", "Order"))
	if o.ev.EventType != "OrderCreated" || o.ev.AggregateVersion != 3 || o.ev.AggregateType != "Order" {
		t.Errorf("event %+v", o.ev)
	}
	// Without the optional header the event is unversioned.
	if o := valid(t, d, record(dbzKey, dbzObjectPayload, "id", dbzEventID, "type", "OrderCreated")); o.ev.AggregateVersion != 0 {
		t.Errorf("version %d without the header", o.ev.AggregateVersion)
	}
	checkPoison(t, d, []poison{
		{"version not a number", record(dbzKey, "{}", "id", dbzEventID, "type", "T", "version", "three"), "invalid:aggregateVersion", `must be a decimal integer, got "three" (header "version")`},
		{"version empty", record(dbzKey, "{}", "id", dbzEventID, "type", "T", "version", ""), "invalid:aggregateVersion", `got ""`},
		{"version 0", record(dbzKey, "{}", "id", dbzEventID, "type", "T", "version", "0"), "invalid:aggregateVersion", "must be >= 1"},
	})
}
