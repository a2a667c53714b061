package wiring_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/bufbuild/protocompile"
	"github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/projector-dev/projector/internal/app/broker"
	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/operator/rebuild"
)

// The order schemas the registry topics are framed with, as a producer
// would register them; the mapped topics point at the same members.
const (
	orderAvro = `{"type":"record","name":"Order","namespace":"shop","fields":[
		{"name":"id","type":"string"},{"name":"type","type":"string"},{"name":"orderId","type":"string"},{"name":"seq","type":"long"},
		{"name":"data","type":{"type":"record","name":"Data","fields":[{"name":"total","type":"int"},{"name":"items","type":{"type":"array","items":"string"}}]}}]}`
	orderProto = `syntax = "proto3";
package shop;
message Data { int32 total = 1; repeated string items = 2; }
message Order { string id = 1; string type = 2; string order_id = 3; int64 seq = 4; Data data = 5; }
`
	orderFields = `{eventId: /id, eventType: /type, aggregateId: /orderId, aggregateVersion: /seq, payload: /data}`
)

// formatsConfig reads one topic per format (and mode) into one versioned
// projection. %s: broker, registry URL, state dir.
const formatsConfig = `name: fmt
kafka:
  brokers: [%s]
  instanceId: fmt-1
  input:
    - {topic: fmt.ce-binary, format: cloudevents}
    - {topic: fmt.ce-structured, format: cloudevents}
    - {topic: fmt.outbox, format: debezium-outbox, fields: {aggregateVersion: "header:version"}}
    - {topic: fmt.mapped, format: mapped, fields: ` + orderFields + `}
    - {topic: fmt.avro, format: mapped, fields: ` + orderFields + `}
    - {topic: fmt.protobuf, format: mapped, fields: {eventId: /id, eventType: /type, aggregateId: /orderId, aggregateVersion: /seq, payload: /data}}
    - {topic: fmt.jsonschema, format: mapped, fields: ` + orderFields + `}
schemaRegistry: {url: "%s", timeout: 1s}
state: {dir: %s}
http: {listen: "off"}
gaps: {holdTimeout: 10m}
projections:
  - {name: orders, topic: fmt.orders.v1, events: {OrderPlaced: merge}}
`

// order is one event of a story: the order's version, its event id and
// the total its payload carries.
type order struct {
	version int
	id      string
	total   int
}

func (o order) payload() map[string]any { return map[string]any{"total": o.total, "items": []any{"a"}} }

func (o order) json(agg string) []byte {
	b, _ := json.Marshal(map[string]any{"id": o.id, "type": "OrderPlaced", "orderId": agg, "seq": o.version, "data": o.payload()})
	return b
}

// format makes a topic's records: an event as its producers write it,
// the same event written differently (a re-serialised copy, which must be a
// duplicate), and a poison record with the reason it must get.
type format struct {
	topic  string
	ev     func(t *testing.T, agg string, o order) *kgo.Record
	copy   func(t *testing.T, agg string, o order) *kgo.Record
	poison func(t *testing.T, agg string) *kgo.Record
	reason string
}

func formats(reg registryIDs) []format {
	mappedJSON := func(_ *testing.T, agg string, o order) *kgo.Record {
		return &kgo.Record{Key: []byte(agg), Value: o.json(agg)}
	}
	// The copy: the members in another order, with whitespace.
	reordered := func(_ *testing.T, agg string, o order) *kgo.Record {
		return &kgo.Record{Key: []byte(agg), Value: fmt.Appendf(nil, `{ "data": {"items": ["a"], "total": %d}, "seq": %d, "orderId": %q, "type": "OrderPlaced", "id": %q }`,
			o.total, o.version, agg, o.id)}
	}
	return []format{
		{topic: "fmt.ce-binary",
			ev:   func(t *testing.T, agg string, o order) *kgo.Record { return ceRecord(t, agg, o, false) },
			copy: func(t *testing.T, agg string, o order) *kgo.Record { return ceRecord(t, agg, o, true) },
			poison: func(t *testing.T, agg string) *kgo.Record {
				r := ceRecord(t, agg, order{1, "x", 0}, false)
				dropHeader(r, "ce_id")
				return r
			},
			reason: "invalid:eventId"},
		{topic: "fmt.ce-structured",
			ev:   func(t *testing.T, agg string, o order) *kgo.Record { return ceRecord(t, agg, o, true) },
			copy: func(t *testing.T, agg string, o order) *kgo.Record { return ceRecord(t, agg, o, false) },
			poison: func(t *testing.T, agg string) *kgo.Record {
				r := ceRecord(t, agg, order{1, "x", 0}, true)
				r.Value = []byte(strings.Replace(string(r.Value), `"specversion":"1.0"`, `"specversion":"0.3"`, 1))
				return r
			},
			reason: "invalid:value"},
		{topic: "fmt.outbox",
			// The router's documented message: key the JSON-quoted
			// aggregate id, the event id and type in headers, the payload
			// expanded (an object) or not (a JSON string holding it).
			ev:   func(_ *testing.T, agg string, o order) *kgo.Record { return outboxRecord(agg, o, false) },
			copy: func(_ *testing.T, agg string, o order) *kgo.Record { return outboxRecord(agg, o, true) },
			poison: func(_ *testing.T, agg string) *kgo.Record {
				r := outboxRecord(agg, order{1, "x", 0}, false)
				dropHeader(r, "id")
				return r
			},
			reason: "invalid:eventId"},
		{topic: "fmt.mapped", ev: mappedJSON, copy: reordered,
			poison: func(_ *testing.T, agg string) *kgo.Record {
				return &kgo.Record{Key: []byte(agg), Value: []byte(`{"type":"OrderPlaced","orderId":"` + agg + `","seq":1}`)}
			},
			reason: "invalid:eventId"},
		{topic: "fmt.avro",
			ev: func(t *testing.T, agg string, o order) *kgo.Record {
				return &kgo.Record{Key: []byte(agg), Value: avroOrder(t, reg.avro, agg, o)}
			},
			copy: reordered, // the same order as plain JSON
			poison: func(_ *testing.T, agg string) *kgo.Record {
				return &kgo.Record{Key: []byte(agg), Value: framed(99, nil, []byte{2})}
			},
			reason: "invalid:value"},
		{topic: "fmt.protobuf",
			ev: func(t *testing.T, agg string, o order) *kgo.Record {
				return &kgo.Record{Key: []byte(agg), Value: protoOrder(t, reg.proto, agg, o)}
			},
			copy: mappedJSON,
			poison: func(_ *testing.T, agg string) *kgo.Record {
				return &kgo.Record{Key: []byte(agg), Value: framed(reg.proto, []int{5}, nil)}
			},
			reason: "invalid:value"},
		{topic: "fmt.jsonschema",
			ev: func(_ *testing.T, agg string, o order) *kgo.Record {
				return &kgo.Record{Key: []byte(agg), Value: framed(reg.jsonSchema, nil, o.json(agg))}
			},
			copy: reordered,
			poison: func(_ *testing.T, agg string) *kgo.Record {
				return &kgo.Record{Key: []byte(agg), Value: framed(reg.jsonSchema, nil, []byte("{"))}
			},
			reason: "invalid:value"},
	}
}

// TestInputFormatsEndToEnd: on every format, through the worker on the
// embedded broker: an event, its duplicate and a re-serialised copy apply
// once; the same id with another payload is a conflict; a version ahead is
// held and drains when the gap fills (from its stored envelope, without the
// registry); a poison record is dead-lettered with its reason. Exactly: the
// projection holds versions 1 to 4 of the aggregate, once each, the last
// with the payload of version 4; the dead letters are the conflict and the
// poison record, nothing else. A rebuild from the same topics then writes a
// projection identical to live's, key by key.
func TestInputFormatsEndToEnd(t *testing.T) {
	reg, ids := startRegistry(t, "")
	fs := formats(ids)
	a, brokers := startFormatsWorker(t, reg.URL())
	cfg := a.Config
	ctx := context.Background()
	var recs []*kgo.Record
	for _, f := range fs {
		agg := "agg-" + f.topic
		v1 := order{1, "e1-" + f.topic, 1}
		story := []*kgo.Record{
			f.ev(t, agg, v1),
			f.ev(t, agg, v1),   // a duplicate
			f.copy(t, agg, v1), // written otherwise: a duplicate too
			f.ev(t, agg, order{1, v1.id, 99}),
			f.ev(t, agg, order{2, "e2-" + f.topic, 2}),
			f.ev(t, agg, order{4, "e4-" + f.topic, 4}), // held: 3 is missing
			f.poison(t, agg),
			f.ev(t, agg, order{3, "e3-" + f.topic, 3}), // fills the gap: 3 and 4 apply
		}
		for _, r := range story {
			r.Topic = f.topic
		}
		recs = append(recs, story...)
	}
	if err := testkit.ProduceRecords(ctx, brokers, 1<<20, recs...); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, brokers, formatTopics...)
	if ok, why := a.Ready(); !ok {
		t.Errorf("the worker is not ready: %s", why)
	}
	checkFormatsOutputs(t, brokers, fs)

	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	res, err := rebuild.Run(rctx, rebuild.Options{Config: cfg, Topic: "fmt.orders.v2", Brokers: brokers,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil || !res.Completed {
		t.Fatalf("rebuild: %+v, %v", res, err)
	}
	diff, err := rebuild.Diff(rctx, rebuild.DiffOptions{Brokers: brokers, A: "fmt.orders.v1", B: "fmt.orders.v2", Max: -1})
	if err != nil {
		t.Fatal(err)
	}
	if !diff.Identical() {
		var b strings.Builder
		diff.Write(&b)
		t.Fatalf("the rebuild differs from live:\n%s", b.String())
	}
	t.Logf("rebuild of %d input records: identical to live (%d keys)", res.Records, diff.Keys)
}

func checkFormatsOutputs(t *testing.T, brokers []string, fs []format) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	projected, err := testkit.ReadAll(ctx, brokers, "fmt.orders.v1")
	if err != nil {
		t.Fatal(err)
	}
	dlq, err := testkit.ReadAll(ctx, brokers, "fmt.dlq")
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string][]int{}
	last := map[string]string{}
	for _, r := range projected {
		var v struct {
			Version int             `json:"version"`
			State   json.RawMessage `json:"state"`
		}
		if err := json.Unmarshal(r.Value, &v); err != nil {
			t.Fatalf("projection record %s: %v", r.Value, err)
		}
		versions[string(r.Key)] = append(versions[string(r.Key)], v.Version)
		last[string(r.Key)] = string(v.State)
	}
	reasons := map[string][]string{}
	for i, d := range testkit.DeadLetters(dlq) {
		topic, _, _ := strings.Cut(d.Source, "/")
		reasons[topic] = append(reasons[topic], d.Reason)
		// A binary-mode CloudEvent's attributes are its headers: its dead
		// letter keeps them, or it could not be read or replayed.
		if topic == "fmt.ce-binary" && d.Reason == "invalid:eventId" {
			var ceType string
			for _, h := range dlq[i].Headers {
				if h.Key == "ce_type" {
					ceType = string(h.Value)
				}
			}
			if ceType != "OrderPlaced" {
				t.Errorf("fmt.ce-binary: the poison record's dead letter has ce_type %q, want its own header OrderPlaced", ceType)
			}
		}
	}
	for _, f := range fs {
		agg := "agg-" + f.topic
		if got := versions[agg]; !slices.Equal(got, []int{1, 2, 3, 4}) {
			t.Errorf("%s: projection versions %v, want [1 2 3 4] (each once)", f.topic, got)
		}
		if !testkit.JSONEqual([]byte(last[agg]), map[string]any{"total": 4, "items": []any{"a"}}) {
			t.Errorf("%s: last state %s, want version 4's payload", f.topic, last[agg])
		}
		got := reasons[f.topic]
		slices.Sort(got)
		want := []string{"conflict", f.reason}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: dead letters %v, want %v", f.topic, got, want)
		}
		t.Logf("%s: projection versions %v, dead letters %v", f.topic, versions[agg], got)
	}
}

// TestSchemaRegistryOutage: the registry stops mid-stream. Records framed
// with a schema the worker has not fetched yet wait: the worker is not ready
// and says why, nothing is dead-lettered; once the registry is back (the
// same address, its schemas replayed from its journal) they are processed.
// Nothing is lost: every version is projected once.
func TestSchemaRegistryOutage(t *testing.T) {
	dir := t.TempDir()
	reg, ids := startRegistry(t, dir)
	addr := strings.TrimPrefix(reg.URL(), "http://")
	a, brokers := startFormatsWorker(t, reg.URL())
	ctx := context.Background()
	send := func(from, to int, schema int) {
		t.Helper()
		var recs []*kgo.Record
		for v := from; v <= to; v++ {
			recs = append(recs, &kgo.Record{Topic: "fmt.avro", Key: []byte("o-1"),
				Value: avroOrder(t, schema, "o-1", order{v, fmt.Sprintf("e%d", v), v})})
		}
		if err := testkit.ProduceRecords(ctx, brokers, 1<<20, recs...); err != nil {
			t.Fatal(err)
		}
	}
	send(1, 5, ids.avro)
	waitCaughtUp(t, brokers, "fmt.avro")

	// A second version of the schema, registered before the outage: the
	// worker has not fetched it.
	cl, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		t.Fatal(err)
	}
	v2 := strings.Replace(orderAvro, `{"name":"seq","type":"long"},`, `{"name":"seq","type":"long"},{"name":"note","type":"string","default":""},`, 1)
	ss, err := cl.CreateSchema(ctx, "fmt.avro-value", sr.Schema{Schema: v2, Type: sr.TypeAvro})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Close(); err != nil {
		t.Fatal(err)
	}
	holdsBefore := a.Processor.Stats().HeldTransactions()
	var recs []*kgo.Record
	for v := 6; v <= 10; v++ {
		b, err := avro.Marshal(avro.MustParse(v2), map[string]any{"id": fmt.Sprintf("e%d", v), "type": "OrderPlaced", "orderId": "o-1",
			"seq": int64(v), "note": "", "data": map[string]any{"total": v, "items": []any{"a"}}})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Topic: "fmt.avro", Key: []byte("o-1"), Value: framed(ss.ID, nil, b)})
	}
	if err := testkit.ProduceRecords(ctx, brokers, 1<<20, recs...); err != nil {
		t.Fatal(err)
	}
	var why string
	if err := testkit.WaitFor(ctx, time.Minute, func() bool {
		var ok bool
		ok, why = a.Ready()
		return !ok && strings.Contains(why, "Schema Registry is unavailable")
	}); err != nil {
		t.Fatalf("while the registry is down the worker says %q, want not ready naming the Schema Registry", why)
	}
	t.Logf("while the registry is down: /readyz says %q", why)
	// The records keep waiting: several attempts, each aborted.
	if err := testkit.WaitFor(ctx, time.Minute, func() bool { return a.Processor.Stats().HeldTransactions() >= holdsBefore+3 }); err != nil {
		t.Fatal("the worker did not retry while the registry was down")
	}

	reg2, err := broker.StartRegistry(addr, dir)
	if err != nil {
		t.Fatalf("restart the registry on %s: %v", addr, err)
	}
	t.Cleanup(func() { reg2.Close() })
	waitCaughtUp(t, brokers, "fmt.avro")
	if err := testkit.WaitFor(ctx, time.Minute, func() bool { ok, _ := a.Ready(); return ok }); err != nil {
		_, why := a.Ready()
		t.Fatalf("the worker is not ready after the registry came back: %s", why)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	projected, err := testkit.ReadAll(rctx, brokers, "fmt.orders.v1")
	if err != nil {
		t.Fatal(err)
	}
	dlq, err := testkit.ReadAll(rctx, brokers, "fmt.dlq")
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, r := range projected {
		var v struct{ Version int }
		json.Unmarshal(r.Value, &v)
		got = append(got, v.Version)
	}
	if !slices.Equal(got, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}) || len(dlq) != 0 {
		t.Fatalf("after the outage: projection versions %v, %d dead letters; want 1..10 once each and none", got, len(dlq))
	}
	t.Logf("outage: %d transactions held and retried, 0 dead letters, 0 lost", a.Processor.Stats().HeldTransactions()-holdsBefore)
}

// registryIDs are the ids of the seeded schemas.
type registryIDs struct{ avro, proto, jsonSchema int }

// startRegistry serves the embedded registry (journaled in dir, when set)
// with the order schemas registered as a producer would.
func startRegistry(t *testing.T, dir string) (*broker.Registry, registryIDs) {
	t.Helper()
	reg, err := broker.StartRegistry("127.0.0.1:0", dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	cl, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		t.Fatal(err)
	}
	register := func(subject, schema string, typ sr.SchemaType) int {
		ss, err := cl.CreateSchema(context.Background(), subject, sr.Schema{Schema: schema, Type: typ})
		if err != nil {
			t.Fatalf("register %s: %v", subject, err)
		}
		return ss.ID
	}
	return reg, registryIDs{
		avro:       register("fmt.avro-value", orderAvro, sr.TypeAvro),
		proto:      register("fmt.protobuf-value", orderProto, sr.TypeProtobuf),
		jsonSchema: register("fmt.jsonschema-value", `{"type":"object"}`, sr.TypeJSON),
	}
}

// formatTopics are the input topics of formatsConfig.
var formatTopics = []string{"fmt.ce-binary", "fmt.ce-structured", "fmt.outbox", "fmt.mapped", "fmt.avro", "fmt.protobuf", "fmt.jsonschema"}

func startFormatsWorker(t *testing.T, registryURL string) (*wiring.App, []string) {
	t.Helper()
	b, brokers := testkit.Broker(t, 1, formatTopics...)
	src := fmt.Sprintf(formatsConfig, b.Addr(), registryURL, filepath.Join(t.TempDir(), "state"))
	return runWorker(t, src), brokers
}

// runWorker runs the worker of the configuration src until the test ends
// (its Run must then return nil); PROJECTOR_TEST_LOG shows its log.
func runWorker(t *testing.T, src string) *wiring.App {
	t.Helper()
	return runWorkerWith(t, src, wiring.Options{})
}

// runWorkerWith is runWorker with options (its Logger is set).
func runWorkerWith(t *testing.T, src string, o wiring.Options) *wiring.App {
	t.Helper()
	cfg, err := config.Parse([]byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	lvl := slog.LevelWarn
	if os.Getenv("PROJECTOR_TEST_LOG") != "" {
		lvl = slog.LevelDebug
	}
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	a, err := wiring.New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		a.Close()
	})
	return a
}

func waitCaughtUp(t *testing.T, brokers []string, topics ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := testkit.WaitCaughtUp(ctx, brokers, "fmt", topics...); err != nil {
		t.Fatal(err)
	}
}

// ceRecord is the order as a CloudEvent the SDK's Kafka binding writes, in
// binary or structured mode.
func ceRecord(t *testing.T, agg string, o order, structured bool) *kgo.Record {
	t.Helper()
	return ceRecordOf(t, agg, ceEvent(t, agg, o), structured)
}

// ceEvent is the order as a CloudEvent.
func ceEvent(t *testing.T, agg string, o order) *event.Event {
	t.Helper()
	e := event.New()
	e.SetID(o.id)
	e.SetSource("/shop/orders")
	e.SetType("OrderPlaced")
	e.SetSubject(agg)
	e.SetTime(time.Date(2026, 6, 28, 10, 15, 30, 0, time.UTC))
	e.SetExtension("sequence", fmt.Sprint(o.version))
	if err := e.SetData("application/json", o.payload()); err != nil {
		t.Fatal(err)
	}
	return &e
}

// ceRecordOf is e as the SDK's Kafka binding writes it, in binary or
// structured mode.
func ceRecordOf(t *testing.T, agg string, e *event.Event, structured bool) *kgo.Record {
	t.Helper()
	ctx := binding.WithForceBinary(context.Background())
	if structured {
		ctx = binding.WithForceStructured(context.Background())
	}
	var pm sarama.ProducerMessage
	if err := kafka_sarama.WriteProducerMessage(ctx, binding.ToMessage(e), &pm); err != nil {
		t.Fatal(err)
	}
	r := &kgo.Record{Key: []byte(agg)}
	if pm.Value != nil {
		r.Value, _ = pm.Value.Encode()
	}
	for _, h := range pm.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: string(h.Key), Value: h.Value})
	}
	return r
}

// outboxRecord is the order as Debezium's Outbox Event Router emits it
// with its defaults (debezium.io, outbox-event-router: "Example outbox
// message"), the type placed as header eventType and the version as header
// version; asString: the payload column not expanded (a JSON string).
func outboxRecord(agg string, o order, asString bool) *kgo.Record {
	payload, _ := json.Marshal(o.payload())
	if asString {
		payload, _ = json.Marshal(string(payload))
	}
	key, _ := json.Marshal(agg)
	return &kgo.Record{Key: key, Value: payload, Headers: []kgo.RecordHeader{
		{Key: "id", Value: []byte(o.id)}, {Key: "eventType", Value: []byte("OrderPlaced")},
		{Key: "version", Value: fmt.Append(nil, o.version)},
	}}
}

func dropHeader(r *kgo.Record, name string) {
	r.Headers = slices.DeleteFunc(r.Headers, func(h kgo.RecordHeader) bool { return h.Key == name })
}

func framed(id int, index []int, data []byte) []byte {
	var h sr.ConfluentHeader
	b, _ := h.AppendEncode(nil, id, index)
	return append(b, data...)
}

func avroOrder(t *testing.T, id int, agg string, o order) []byte {
	t.Helper()
	b, err := avro.Marshal(avro.MustParse(orderAvro), map[string]any{"id": o.id, "type": "OrderPlaced", "orderId": agg,
		"seq": int64(o.version), "data": map[string]any{"total": o.total, "items": []any{"a"}}})
	if err != nil {
		t.Fatal(err)
	}
	return framed(id, nil, b)
}

// protoOrder is the order as a Protobuf producer writes it: built by the
// protobuf runtime, marshalled, framed with its message index.
func protoOrder(t *testing.T, id int, agg string, o order) []byte {
	t.Helper()
	comp := protocompile.Compiler{Resolver: &protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(map[string]string{"o.proto": orderProto})}}
	files, err := comp.Compile(context.Background(), "o.proto")
	if err != nil {
		t.Fatal(err)
	}
	md := files[0].Messages().ByName(protoreflect.Name("Order"))
	m := dynamicpb.NewMessage(md)
	js := fmt.Sprintf(`{"id":%q,"type":"OrderPlaced","orderId":%q,"seq":"%d","data":{"total":%d,"items":["a"]}}`, o.id, agg, o.version, o.total)
	if err := protojson.Unmarshal([]byte(js), m); err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return framed(id, []int{md.Index()}, b)
}
