package inputformat

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bufbuild/protocompile"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/internal/core/schemaregistry"
)

// The order of orderJSON in three registry formats; ids 1, 2, 3.
const (
	avroID, protoID, jsonSchemaID, keyID = 1, 2, 3, 4

	orderAvro = `{"type":"record","name":"Order","namespace":"shop","fields":[
		{"name":"id","type":"string"},{"name":"type","type":"string"},{"name":"orderId","type":"string"},{"name":"seq","type":"long"},
		{"name":"data","type":{"type":"record","name":"Data","fields":[{"name":"total","type":"int"},{"name":"items","type":{"type":"array","items":"string"}}]}}]}`
	orderProto = `syntax = "proto3";
package shop;
message Data { int32 total = 1; repeated string items = 2; }
message Order { string id = 1; string type = 2; string order_id = 3; int64 seq = 4; Data data = 5; }
`
)

// seedRegistry is an srfake registry with the order schemas and a string
// key schema.
func seedRegistry(reg *srfake.Registry) {
	reg.SeedSchema("orders.avro-value", 1, avroID, sr.Schema{Schema: orderAvro, Type: sr.TypeAvro})
	reg.SeedSchema("orders.proto-value", 1, protoID, sr.Schema{Schema: orderProto, Type: sr.TypeProtobuf})
	reg.SeedSchema("orders.json-value", 1, jsonSchemaID, sr.Schema{Schema: `{"type":"object"}`, Type: sr.TypeJSON})
	reg.SeedSchema("outbox-key", 1, keyID, sr.Schema{Schema: `"string"`, Type: sr.TypeAvro})
}

func newSchemas(t testing.TB, url string) *schemaregistry.Client {
	t.Helper()
	c, err := schemaregistry.New(schemaregistry.Options{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func framed(id int, index []int, data []byte) []byte {
	var h sr.ConfluentHeader
	b, _ := h.AppendEncode(nil, id, index)
	return append(b, data...)
}

// avroValue encodes v with schema as hamba/avro does (the producer's side).
func avroValue(t testing.TB, id int, schema string, v any) []byte {
	t.Helper()
	b, err := avro.Marshal(avro.MustParse(schema), v)
	if err != nil {
		t.Fatal(err)
	}
	return framed(id, nil, b)
}

func avroOrder(t testing.TB, total int) []byte {
	return avroValue(t, avroID, orderAvro, map[string]any{"id": "e-1", "type": "OrderPlaced", "orderId": "o-1", "seq": int64(1),
		"data": map[string]any{"total": total, "items": []any{"a"}}})
}

// protoValue is a message of schema as a Protobuf producer writes it: built
// by the protobuf runtime from its JSON form js, marshalled, framed with
// its message index (a top-level message).
func protoValue(t testing.TB, id int, schema, name, js string) []byte {
	t.Helper()
	comp := protocompile.Compiler{Resolver: &protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(map[string]string{"s.proto": schema})}}
	files, err := comp.Compile(context.Background(), "s.proto")
	if err != nil {
		t.Fatal(err)
	}
	md := files[0].Messages().ByName(protoreflect.Name(name))
	m := dynamicpb.NewMessage(md)
	if err := protojson.Unmarshal([]byte(js), m); err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return framed(id, []int{md.Index()}, b)
}

func protoOrder(t testing.TB, js string) []byte {
	return protoValue(t, protoID, orderProto, "Order", js)
}

func jsonQuote(s string) (string, error) {
	b, err := json.Marshal(s)
	return string(b), err
}

// TestRegistryFormatsStory: one order as plain JSON, as Avro, as Protobuf
// and as JSON Schema on one mapped topic: every copy is a duplicate of the
// JSON one; a changed Avro payload is a conflict; registry values that can
// never decode are invalid:value naming the schema id.
func TestRegistryFormatsStory(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	seedRegistry(reg)
	d := mustNew(t, Options{Format: Mapped, Fields: orderFields, Schemas: newSchemas(t, reg.URL())})
	checkStory(t, d, record("o-1", orderJSON),
		map[string]*kgo.Record{
			"Avro":        record("o-1", string(avroOrder(t, 10))),
			"Protobuf":    record("o-1", string(protoOrder(t, `{"id":"e-1","type":"OrderPlaced","orderId":"o-1","seq":"1","data":{"total":10,"items":["a"]}}`))),
			"JSON Schema": record("o-1", string(framed(jsonSchemaID, nil, []byte(orderJSON)))),
		},
		record("o-1", string(avroOrder(t, 11))))
	if o := valid(t, d, record("o-1", string(avroOrder(t, 10)))); o.res.SchemaID != avroID {
		t.Errorf("schema id %d, want %d", o.res.SchemaID, avroID)
	}
	truncated := avroOrder(t, 10)
	checkPoison(t, d, []poison{
		{"unknown schema id", record("", string(framed(99, nil, []byte{2}))), "invalid:value", "schema id 99: unknown to the registry (fetching the schema: 404, error code 40403)"},
		{"Avro data that does not fit", record("", string(truncated[:len(truncated)-3])), "invalid:value", "schema id 1: Avro value does not decode"},
		{"Protobuf index out of range", record("", string(framed(protoID, []int{5}, nil))), "invalid:value", "schema id 2: Protobuf value does not decode: message index [5]"},
		{"JSON Schema value not JSON", record("", string(framed(jsonSchemaID, nil, []byte("{")))), "invalid:value", "(decoded with schema 3): not JSON"},
		{"a framed value that is not an object", record("", string(avroValue(t, keyID, `"string"`, "x"))), "invalid:value", "must be a JSON object, got a string"},
	})
}

// TestRegistryInOtherFormats: Debezium with the Avro converter (value and
// key framed) and a binary-mode CloudEvent whose data is Avro.
func TestRegistryInOtherFormats(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	seedRegistry(reg)
	schemas := newSchemas(t, reg.URL())

	dbz := mustNew(t, Options{Format: DebeziumOutbox, Schemas: schemas})
	plain := valid(t, dbz, record(`"o-1"`, `{"id":"e-1","type":"OrderPlaced","orderId":"o-1","seq":1,"data":{"total":10,"items":["a"]}}`, "id", "evt-1", "eventType", "OrderPlaced"))
	r := record("", string(avroOrder(t, 10)), "id", "evt-1", "eventType", "OrderPlaced")
	r.Key = avroValue(t, keyID, `"string"`, "o-1")
	o := valid(t, dbz, r)
	if o.ev.AggregateID != "o-1" || o.ev.Fingerprint() != plain.ev.Fingerprint() || o.dedupID() != plain.dedupID() {
		t.Errorf("Debezium with Avro: %s, want the JSON record's event %s", o.res.Value, plain.res.Value)
	}

	ce := mustNew(t, Options{Format: CloudEvents, Schemas: schemas})
	bin := record("", string(avroOrder(t, 10)), "ce_specversion", "1.0", "ce_id", "e-1", "ce_source", "/orders",
		"ce_type", "OrderPlaced", "ce_subject", "o-1", "content-type", "application/avro")
	if o := valid(t, ce, bin); !strings.Contains(string(o.ev.Payload), `"data":{"total":10,"items":["a"]}`) || o.res.SchemaID != avroID {
		t.Errorf("CloudEvent with Avro data: payload %s", o.ev.Payload)
	}
}

// TestRegistryOutageIsRetryable: while the registry is down (stopped, or
// answering 503) a framed record is neither valid nor invalid: the error
// wraps ErrUnavailable, so the processor holds the partition instead of
// dead-lettering it. Prepare reports the same; once the registry is back
// the record decodes, and what Prepare cached decodes while it is down.
func TestRegistryOutageIsRetryable(t *testing.T) {
	backend := srfake.NewRegistry()
	seedRegistry(backend)
	var down atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return
		}
		backend.Handler().ServeHTTP(w, r)
	}))
	defer srv.Close()
	stopped := srfake.New()
	seedRegistry(stopped)
	stoppedURL := stopped.URL()
	stopped.Close()

	avroRec := record("o-1", string(avroOrder(t, 10)))
	protoRec := record("o-1", string(protoOrder(t, `{"id":"e-1"}`)))
	ctx := context.Background()
	for name, url := range map[string]string{"stopped": stoppedURL, "503": srv.URL} {
		t.Run(name, func(t *testing.T) {
			down.Store(true)
			d := mustNew(t, Options{Format: Mapped, Fields: orderFields, Schemas: newSchemas(t, url)})
			_, err := decodeRecord(d, ctx, avroRec)
			var ee *envelope.Error
			if !errors.Is(err, ErrUnavailable) || errors.As(err, &ee) {
				t.Fatalf("Decode while down: %v, want ErrUnavailable and no dead-letter reason", err)
			}
			if err := d.Prepare(ctx, []*kgo.Record{avroRec}); !errors.Is(err, ErrUnavailable) {
				t.Fatalf("Prepare while down: %v, want ErrUnavailable", err)
			}
		})
	}
	down.Store(false)
	d := mustNew(t, Options{Format: Mapped, Fields: orderFields, Schemas: newSchemas(t, srv.URL)})
	unknown := record("", string(framed(99, nil, nil)))
	if err := d.Prepare(ctx, []*kgo.Record{record("", orderJSON), avroRec, unknown}); err != nil {
		t.Fatalf("Prepare after recovery: %v (an unknown id is left to Decode)", err)
	}
	down.Store(true)
	if o := decodeOne(t, d, avroRec); o.ev == nil {
		t.Fatalf("a prepared schema did not decode while the registry is down: %s %v", o.msg, o.err)
	}
	if _, err := decodeRecord(d, ctx, protoRec); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("an unprepared schema while down: %v", err)
	}
}

// TestPrepareFetchesKeysOnlyWhenUsed: a framed key's schema is fetched
// only by a decoder that reads a member from the key.
func TestPrepareFetchesKeysOnlyWhenUsed(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	seedRegistry(reg)
	var keyFetches atomic.Int64
	reg.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/schemas/ids/4" {
			keyFetches.Add(1)
		}
		return false
	})
	r := record("", orderJSON)
	r.Key = avroValue(t, keyID, `"string"`, "o-1")
	ctx := context.Background()
	if err := mustNew(t, Options{Format: Mapped, Fields: orderFields, Schemas: newSchemas(t, reg.URL())}).Prepare(ctx, []*kgo.Record{r}); err != nil {
		t.Fatal(err)
	}
	if n := keyFetches.Load(); n != 0 {
		t.Fatalf("the key's schema was fetched %d times by a decoder that does not read the key", n)
	}
	if err := mustNew(t, Options{Format: DebeziumOutbox, Schemas: newSchemas(t, reg.URL())}).Prepare(ctx, []*kgo.Record{r}); err != nil {
		t.Fatal(err)
	}
	if n := keyFetches.Load(); n != 1 {
		t.Fatalf("the key's schema was fetched %d times by the Debezium decoder, want 1", n)
	}
}
