package schemaregistry

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/bufbuild/protocompile"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

const moneyProto = `syntax = "proto3";
package shop;
message Money { string currency = 1; int64 cents = 2; }
`

const orderProto = `syntax = "proto3";
package shop;
import "shop/money.proto";
import "google/protobuf/timestamp.proto";
message Header { string id = 1; }
message Order {
  string order_id = 1;
  int32 seq = 2;
  Money total = 3;
  google.protobuf.Timestamp at = 4;
  repeated string tags = 5;
  message Line { string sku = 1; }
  repeated Line lines = 6;
}
`

// protoMessage builds a message of the compiled files from its protojson
// form and marshals it: the producer's side, done with the protobuf
// runtime, not with the code under test.
func protoMessage(t *testing.T, name protoreflect.FullName, js string) []byte {
	t.Helper()
	comp := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{"order.proto": orderProto, "shop/money.proto": moneyProto}),
	})}
	files, err := comp.Compile(context.Background(), "order.proto")
	if err != nil {
		t.Fatal(err)
	}
	d := files[0].FindDescriptorByName(name)
	if d == nil {
		t.Fatalf("no %s", name)
	}
	m := dynamicpb.NewMessage(d.(protoreflect.MessageDescriptor))
	if err := protojson.Unmarshal([]byte(js), m); err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func seedOrderProto(t *testing.T) (*Client, func()) {
	reg := newRegistry(t)
	reg.SeedSchema("shop/money.proto", 1, 20, sr.Schema{Schema: moneyProto, Type: sr.TypeProtobuf})
	reg.SeedSchema("orders-value", 1, 21, sr.Schema{Schema: orderProto, Type: sr.TypeProtobuf,
		References: []sr.SchemaReference{{Name: "shop/money.proto", Subject: "shop/money.proto", Version: 1}}})
	return newClient(t, Options{URL: reg.URL()}), reg.Close
}

// TestProtobufDecodes: a schema with a reference and a well-known import,
// each message index form: [1] (the second top-level message), [0] written
// as the one-byte shortcut, [1, 0] (a nested message).
func TestProtobufDecodes(t *testing.T) {
	cl, _ := seedOrderProto(t)
	order := protoMessage(t, "shop.Order", `{"orderId":"o-1","seq":3,"total":{"currency":"EUR","cents":"1999"},
		"at":"2026-06-28T10:15:30Z","tags":["a","b"],"lines":[{"sku":"x"}]}`)
	cases := []struct {
		name  string
		index []int
		data  []byte
		want  string
	}{
		{"top-level message 1", []int{1}, order,
			`{"orderId":"o-1","seq":3,"total":{"currency":"EUR","cents":"1999"},"at":"2026-06-28T10:15:30Z","tags":["a","b"],"lines":[{"sku":"x"}]}`},
		{"first message, shortcut", []int{0}, protoMessage(t, "shop.Header", `{"id":"h"}`), `{"id":"h"}`},
		{"nested message", []int{1, 0}, protoMessage(t, "shop.Order.Line", `{"sku":"y"}`), `{"sku":"y"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := cl.Decode(context.Background(), frame(21, c.index, c.data), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			// Exact bytes: protojson's deliberately unstable spacing is compacted away.
			if string(got) != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestProtobufRejects(t *testing.T) {
	cl, _ := seedOrderProto(t)
	cases := []struct {
		name  string
		value []byte
		want  string
	}{
		{"index out of range", frame(21, []int{7}, nil), "message index [7] names no message"},
		{"bad wire data", frame(21, []int{1}, []byte{0x0a, 0x05, 'a'}), "shop.Order: "},
		{"too many indexes", append(frame(21, nil, nil), 0x50), "message indexes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := cl.Decode(context.Background(), c.value, nil, 0)
			var ie *InvalidError
			if !errors.As(err, &ie) || ie.SchemaID != 21 || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want *InvalidError for 21 containing %q", err, c.want)
			}
		})
	}
}

func TestProtobufSchemaThatDoesNotCompileIsInvalid(t *testing.T) {
	reg := newRegistry(t)
	reg.SeedSchema("bad-value", 1, 8, sr.Schema{Schema: `syntax = "proto3"; message M { nonsense }`, Type: sr.TypeProtobuf})
	_, err := newClient(t, Options{URL: reg.URL()}).Decode(context.Background(), frame(8, []int{0}, nil), nil, 0)
	var ie *InvalidError
	if !errors.As(err, &ie) || ie.SchemaID != 8 || !strings.Contains(err.Error(), "does not compile") {
		t.Fatalf("err = %v", err)
	}
}

func TestCompact(t *testing.T) {
	in := "pre{ \"a b\" : [ 1 ,\n\t\"x \\\" y\\\\\" ] , \"c\":\" \" }"
	if got, want := string(compact([]byte(in), 3)), `pre{"a b":[1,"x \" y\\"],"c":" "}`; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}
