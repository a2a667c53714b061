package config

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// inputsYAML is the example: a plain name next to the three other
// formats, and a registry.
const inputsYAML = `name: fmt
kafka:
  brokers: embedded
  input:
    - case-events
    - topic: billing.events
      format: cloudevents
    - topic: outbox.event.order
      format: debezium-outbox
      fields: {aggregateVersion: "header:version"}
    - topic: orders.avro
      format: mapped
      fields: {eventId: /id, eventType: /type, aggregateId: /orderId, aggregateVersion: /seq, payload: /data}
schemaRegistry:
  url: http://registry:8081
  username: key
  password: ${SR_SECRET}
  timeout: 2s
projections:
  - {name: p, topic: p.v1, events: {A: merge}}
`

// TestInputFormatsParse: each kafka.input entry is a plain name (the
// envelope) or a mapping; the registry section is read with its
// references expanded.
func TestInputFormatsParse(t *testing.T) {
	c, err := Parse([]byte(inputsYAML), func(k string) (string, bool) { return "s3cret", k == "SR_SECRET" })
	if err != nil {
		t.Fatal(err)
	}
	want := []InputTopic{
		{Topic: "case-events"},
		{Topic: "billing.events", Format: "cloudevents"},
		{Topic: "outbox.event.order", Format: "debezium-outbox", Fields: map[string]string{"aggregateVersion": "header:version"}},
		{Topic: "orders.avro", Format: "mapped", Fields: map[string]string{
			"eventId": "/id", "eventType": "/type", "aggregateId": "/orderId", "aggregateVersion": "/seq", "payload": "/data"}},
	}
	if !reflect.DeepEqual(c.Kafka.Input, want) {
		t.Errorf("kafka.input = %+v\nwant %+v", c.Kafka.Input, want)
	}
	if got := c.Kafka.InputNames(); !reflect.DeepEqual(got, []string{"case-events", "billing.events", "outbox.event.order", "orders.avro"}) {
		t.Errorf("InputNames = %v", got)
	}
	o := c.SchemaRegistry.ClientOptions()
	if o.URL != "http://registry:8081" || o.Username != "key" || o.Password != "s3cret" || o.Timeout != 2*time.Second {
		t.Errorf("schemaRegistry = %+v", o)
	}
}

// TestInputFormatsErrors: a bad entry, format, field or registry setting
// is refused naming its key.
func TestInputFormatsErrors(t *testing.T) {
	base := func(input, extra string) string {
		return "name: fmt\nkafka: {brokers: embedded, input: [" + input + "]}\nprojections:\n  - {name: p, topic: p.v1, events: {A: merge}}\n" + extra
	}
	for _, tc := range []struct{ yaml, want string }{
		{base("[a]", ""), "kafka.input[0]: expected a topic name or {topic: …, format: …}, got a list"},
		{base("{topic: a, format: avro}", ""), `kafka.input[0].format: must be one of [envelope cloudevents debezium-outbox mapped], got "avro"`},
		{base("{topic: a, format: mapped, fields: {eventType: /t, aggregateId: /a}}", ""), "kafka.input[0].fields.eventId"},
		{base("{topic: a, format: mapped, fields: {eventId: id, eventType: /t, aggregateId: /a}}", ""), "kafka.input[0].fields.eventId"},
		{base("{topic: a, format: cloudevents, fields: {color: /c}}", ""), "kafka.input[0].fields.color"},
		{base("{topic: a, fields: {eventId: /id}}", ""), "kafka.input[0].fields"},
		{base("{topic: a, format: cloudevents, bogus: 1}", ""), "kafka.input[0].bogus"},
		{base("{format: cloudevents}", ""), "kafka.input[0]"},
		{base("a", "schemaRegistry: {username: u}\n"), "schemaRegistry.url: required"},
		{base("a", "schemaRegistry: {url: 'ftp://r'}\n"), "schemaRegistry: url"},
		{base("a", "schemaRegistry: {url: 'http://r:8081', username: u, bearerToken: t}\n"), "schemaRegistry: basic auth and a bearer token are mutually exclusive"},
		{base("a", "schemaRegistry: {url: 'http://r:8081', cacheSize: -1}\n"), "schemaRegistry.cacheSize"},
		{base("a, {topic: b, format: cloudevents}", "ingress: {listen: 127.0.0.1:8080, topic: b}\n"), `ingress.topic: "b" is read as format cloudevents`},
		{base("{topic: b, format: cloudevents}", "ingress: {listen: 127.0.0.1:8080}\n"), `ingress.topic: "b" is read as format cloudevents`},
	} {
		_, err := Parse([]byte(tc.yaml), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s\ngot %v\nwant an error containing %q", tc.yaml, err, tc.want)
		}
	}
	// The envelope format named explicitly is the plain name.
	c, err := Parse([]byte(base("{topic: a, format: envelope}", "")), nil)
	if err != nil || c.Kafka.Input[0].Topic != "a" {
		t.Fatalf("format: envelope: %v", err)
	}
}
