package schemaregistry

import (
	"context"
	"errors"
	"math"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
)

// avroCase is a schema, a value hamba/avro encodes with it (an encoder we
// did not write), and the JSON the value must decode to.
type avroCase struct {
	name   string
	schema string
	value  any
	want   string
}

var avroCases = []avroCase{
	{"primitives", `{"type":"record","name":"P","fields":[
		{"name":"s","type":"string"},{"name":"i","type":"int"},{"name":"l","type":"long"},
		{"name":"f","type":"float"},{"name":"d","type":"double"},{"name":"b","type":"boolean"},
		{"name":"n","type":"null"},{"name":"by","type":"bytes"}]}`,
		map[string]any{"s": "é\"\n", "i": -7, "l": int64(1) << 53, "f": float32(39.98), "d": 0.1, "b": true, "n": nil, "by": []byte{0, 1, 0xff}},
		`{"s":"é\"\n","i":-7,"l":9007199254740992,"f":39.98,"d":0.1,"b":true,"n":null,"by":"AAH/"}`},
	{"union branches unwrapped", `{"type":"record","name":"U","fields":[
		{"name":"a","type":["null","string"]},{"name":"b","type":["null","string"]},{"name":"c","type":["int","string"]}]}`,
		map[string]any{"a": nil, "b": map[string]any{"string": "x"}, "c": map[string]any{"int": 3}},
		`{"a":null,"b":"x","c":3}`},
	{"enum array map nested record", `{"type":"record","name":"E","fields":[
		{"name":"e","type":{"type":"enum","name":"Colour","symbols":["RED","GREEN"]}},
		{"name":"a","type":{"type":"array","items":"long"}},
		{"name":"m","type":{"type":"map","values":"string"}},
		{"name":"r","type":{"type":"record","name":"Inner","fields":[{"name":"x","type":"int"}]}},
		{"name":"r2","type":"Inner"}]}`,
		map[string]any{"e": "GREEN", "a": []any{int64(1), int64(2)}, "m": map[string]any{"k": "v"}, "r": map[string]any{"x": 1}, "r2": map[string]any{"x": 2}},
		`{"e":"GREEN","a":[1,2],"m":{"k":"v"},"r":{"x":1},"r2":{"x":2}}`},
	{"logical types", `{"type":"record","name":"L","fields":[
		{"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}},
		{"name":"tu","type":{"type":"long","logicalType":"timestamp-micros"}},
		{"name":"lt","type":{"type":"long","logicalType":"local-timestamp-millis"}},
		{"name":"d","type":{"type":"int","logicalType":"date"}},
		{"name":"tm","type":{"type":"int","logicalType":"time-millis"}},
		{"name":"dec","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":2}},
		{"name":"neg","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":3}},
		{"name":"fd","type":{"type":"fixed","name":"F4","size":4,"logicalType":"decimal","precision":8,"scale":0}},
		{"name":"u","type":{"type":"string","logicalType":"uuid"}},
		{"name":"fx","type":{"type":"fixed","name":"F2","size":2}}]}`,
		map[string]any{
			"ts": time.Date(2026, 6, 28, 10, 15, 30, 123e6, time.UTC), "tu": time.Date(2026, 6, 28, 10, 15, 30, 123456e3, time.UTC),
			"lt": time.Date(2026, 6, 28, 10, 15, 30, 0, time.UTC), "d": time.Date(2026, 6, 28, 0, 0, 0, 0, time.UTC),
			"tm": 90 * time.Second, "dec": big.NewRat(12345, 100), "neg": big.NewRat(-5, 1000), "fd": big.NewRat(-42, 1),
			"u": "4d47e190-0402-4048-bc2c-89dd54343cdc", "fx": [2]byte{0xfb, 0xff},
		},
		`{"ts":"2026-06-28T10:15:30.123Z","tu":"2026-06-28T10:15:30.123456Z","lt":"2026-06-28T10:15:30","d":"2026-06-28",` +
			`"tm":90000,"dec":"123.45","neg":"-0.005","fd":"-42","u":"4d47e190-0402-4048-bc2c-89dd54343cdc","fx":"+/8="}`},
}

func TestAvroDecodes(t *testing.T) {
	for _, c := range avroCases {
		t.Run(c.name, func(t *testing.T) {
			s := avro.MustParse(c.schema)
			data, err := avro.Marshal(s, c.value)
			if err != nil {
				t.Fatal(err)
			}
			out, msg := avroSchema{s}.decode(data, []byte("prefix:"), 1<<20)
			if msg != "" {
				t.Fatalf("decode: %s", msg)
			}
			if got := string(out); got != "prefix:"+c.want {
				t.Errorf("got  %s\nwant prefix:%s", got, c.want)
			}
		})
	}
}

func TestAvroRejects(t *testing.T) {
	rec := avro.MustParse(`{"type":"record","name":"R","fields":[{"name":"s","type":"string"},{"name":"i","type":"int"}]}`)
	good, _ := avro.Marshal(rec, map[string]any{"s": "ab", "i": 1})
	list := avro.MustParse(`{"type":"record","name":"Node","fields":[{"name":"next","type":["null","Node"]}]}`)
	deep := make([]byte, 0, 200)
	for range 100 {
		deep = append(deep, 2) // union branch 1: another Node
	}
	deep = append(deep, 0)
	cases := []struct {
		name   string
		schema avro.Schema
		data   []byte
		limit  int
		want   string
	}{
		{"truncated", rec, good[:2], 1 << 20, "length 2 exceeds the 1 bytes left"},
		{"trailing bytes", rec, append(append([]byte{}, good...), 9), 1 << 20, "1 bytes after the value"},
		{"string length lies", rec, []byte{0xfe, 0xff, 0xff, 0xff, 0x0f}, 1 << 20, "exceeds the 0 bytes left"},
		{"negative length", rec, []byte{0x01}, 1 << 20, "length -1 exceeds"},
		{"bad varint", rec, []byte{0x04, 'a', 'b', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 1 << 20, "bad varint"},
		{"int out of range", rec, []byte{0x00, 0xfe, 0xff, 0xff, 0xff, 0x1f}, 1 << 20, "int out of range"},
		{"invalid UTF-8", rec, []byte{0x02, 0xff, 0x02}, 1 << 20, "not valid UTF-8"},
		{"union index", list, []byte{0x04}, 1 << 20, "union index 2 out of range"},
		{"enum index", avro.MustParse(`{"type":"enum","name":"C","symbols":["A"]}`), []byte{0x02}, 1 << 20, "enum index 1 out of range"},
		{"boolean", avro.MustParse(`"boolean"`), []byte{2}, 1 << 20, "boolean is not 0 or 1"},
		{"NaN", avro.MustParse(`"double"`), []byte{0, 0, 0, 0, 0, 0, 0xf8, 0x7f}, 1 << 20, "NaN or an infinity"},
		{"recursion deeper than the envelope allows", list, deep, 1 << 20, "nests deeper than 64 levels"},
		// 2^62 items of nothing: bounded by the output, not by the claim.
		{"endless empty items", avro.MustParse(`{"type":"array","items":"null"}`), []byte{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, 4096, "decodes to more than 4096 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, msg := avroSchema{c.schema}.decode(c.data, nil, c.limit)
			if !strings.Contains(msg, c.want) {
				t.Errorf("message %q, want it to contain %q", msg, c.want)
			}
		})
	}
}

func TestAvroDecimalFormatting(t *testing.T) {
	for _, c := range []struct {
		unscaled int64
		scale    int
		want     string
	}{{0, 2, "0.00"}, {5, 2, "0.05"}, {-5, 2, "-0.05"}, {12345, 2, "123.45"}, {-128, 0, "-128"}, {math.MaxInt64, 4, "922337203685477.5807"}} {
		b := new(big.Int).SetInt64(c.unscaled)
		var raw []byte
		if c.unscaled >= 0 {
			raw = append([]byte{0}, b.Bytes()...)
		} else { // two's complement in 9 bytes
			raw = new(big.Int).Add(b, new(big.Int).Lsh(big.NewInt(1), 72)).Bytes()
		}
		if got := string(appendDecimal(nil, raw, c.scale)); got != c.want {
			t.Errorf("%d scale %d: got %s, want %s", c.unscaled, c.scale, got, c.want)
		}
	}
}

// TestAvroReferences: a schema using a named type registered under another
// subject (a Confluent schema reference) decodes.
func TestAvroReferences(t *testing.T) {
	reg := newRegistry(t)
	addr := `{"type":"record","name":"Address","namespace":"shop","fields":[{"name":"city","type":"string"}]}`
	reg.SeedSchema("address-value", 1, 10, sr.Schema{Schema: addr, Type: sr.TypeAvro})
	order := `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"id","type":"string"},{"name":"ship","type":"shop.Address"}]}`
	reg.SeedSchema("order-value", 1, 11, sr.Schema{Schema: order, Type: sr.TypeAvro,
		References: []sr.SchemaReference{{Name: "shop.Address", Subject: "address-value", Version: 1}}})

	// Encode with the two schemas parsed together, as a producer would.
	cache := &avro.SchemaCache{}
	if _, err := avro.ParseWithCache(addr, "", cache); err != nil {
		t.Fatal(err)
	}
	s, err := avro.ParseWithCache(order, "", cache)
	if err != nil {
		t.Fatal(err)
	}
	data, err := avro.Marshal(s, map[string]any{"id": "o-1", "ship": map[string]any{"city": "Ghent"}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := newClient(t, Options{URL: reg.URL()}).Decode(context.Background(), frame(11, nil, data), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"id":"o-1","ship":{"city":"Ghent"}}`; string(got) != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestAvroSchemaThatDoesNotParseIsInvalid(t *testing.T) {
	reg := newRegistry(t)
	reg.SeedSchema("bad-value", 1, 5, sr.Schema{Schema: `{"type":"nonsense"}`, Type: sr.TypeAvro})
	_, err := newClient(t, Options{URL: reg.URL()}).Decode(context.Background(), frame(5, nil, []byte{0}), nil, 0)
	var ie *InvalidError
	if !errors.As(err, &ie) || ie.SchemaID != 5 || !strings.Contains(err.Error(), "schema id 5: Avro schema does not parse") {
		t.Fatalf("err = %v, want *InvalidError for schema id 5", err)
	}
}
