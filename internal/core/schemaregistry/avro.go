package schemaregistry

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/projector-dev/projector/internal/core/jsonenc"
)

// maxDepth bounds nesting in the JSON a value decodes to: the envelope's
// limit (envelope.MaxDepth), so that a recursive schema cannot make a deep
// walk out of a short value.
const maxDepth = 64

// compileAvro parses an Avro schema after its references, which register
// their named types in a cache private to this schema.
func (c *Client) compileAvro(ctx context.Context, id int, s sr.Schema) (decoder, error) {
	names := &avro.SchemaCache{}
	err := c.references(ctx, id, s.References, map[string]bool{}, 0, func(name string, ref sr.SubjectSchema) error {
		if ref.Type != sr.TypeAvro {
			return &InvalidError{SchemaID: id, Msg: fmt.Sprintf("reference %q is %s, not Avro", name, ref.Type)}
		}
		if _, err := avro.ParseWithCache(ref.Schema.Schema, "", names); err != nil {
			return &InvalidError{SchemaID: id, Msg: fmt.Sprintf("reference %q does not parse: %v", name, err)}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	parsed, err := avro.ParseWithCache(s.Schema, "", names)
	if err != nil {
		return nil, &InvalidError{SchemaID: id, Msg: "Avro schema does not parse: " + err.Error()}
	}
	return avroSchema{parsed}, nil
}

// avroSchema decodes Avro binary data (the Avro 1.11 specification,
// "Binary Encoding") by walking the schema, writing JSON as a JSON
// producer of the same event would, not in Avro's own JSON encoding:
//   - a union is its branch's value, without the {"type": …} wrapper;
//   - a record is an object with its fields in schema order, a map an
//     object, an enum its symbol, bytes and fixed base64 (standard, padded);
//   - float and double as the shortest decimal that reads back to them
//     (NaN and infinities have no JSON form: the value is invalid);
//   - logical types: timestamp-millis/-micros as RFC 3339 UTC strings (so
//     they can be an occurredAt), local-timestamp-* the same without a
//     zone, date as YYYY-MM-DD, decimal as a string holding the exact
//     decimal, uuid as the string; time-millis/-micros as the integer.
//
// The data is read with a reader of its own rather than hamba's: every
// length is checked against the bytes present before anything is
// allocated, and nesting and output size are bounded, whatever the value
// claims.
type avroSchema struct{ s avro.Schema }

func (avroSchema) kind() string { return "Avro" }

func (a avroSchema) decode(data, dst []byte, limit int) ([]byte, string) {
	w := avroWriter{avroReader: avroReader{b: data}, out: dst, limit: limit}
	w.value(a.s, 1)
	if w.err == "" && w.pos != len(w.b) {
		w.err = fmt.Sprintf("%d bytes after the value", len(w.b)-w.pos)
	}
	return w.out, w.err
}

// avroReader reads Avro's binary primitives from b; the first problem is
// kept in err and makes every later read return zero.
type avroReader struct {
	b   []byte
	pos int
	err string
}

func (r *avroReader) fail(msg string) {
	if r.err == "" {
		r.err = fmt.Sprintf("%s at offset %d", msg, r.pos)
	}
}

// long reads a zig-zag varint of at most 10 bytes.
func (r *avroReader) long() int64 {
	if r.err != "" {
		return 0
	}
	u, n := binary.Uvarint(r.b[r.pos:])
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.pos += n
	return int64(u>>1) ^ -int64(u&1)
}

func (r *avroReader) int32() int32 {
	v := r.long()
	if v < math.MinInt32 || v > math.MaxInt32 {
		r.fail("int out of range")
		return 0
	}
	return int32(v)
}

// next returns the next n bytes, which must be present.
func (r *avroReader) next(n int64) []byte {
	if r.err != "" {
		return nil
	}
	if n < 0 || n > int64(len(r.b)-r.pos) {
		r.fail(fmt.Sprintf("length %d exceeds the %d bytes left", n, len(r.b)-r.pos))
		return nil
	}
	b := r.b[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return b
}

// avroWriter writes the JSON of the value being read.
type avroWriter struct {
	avroReader
	out   []byte
	limit int
}

func (w *avroWriter) value(s avro.Schema, depth int) {
	if w.err != "" {
		return
	}
	if len(w.out) > w.limit {
		w.fail(fmt.Sprintf("decodes to more than %d bytes", w.limit))
		return
	}
	var logical avro.LogicalType
	if ls, ok := s.(avro.LogicalTypeSchema); ok && ls.Logical() != nil {
		logical = ls.Logical().Type()
	}
	switch s.Type() {
	case avro.Null:
		w.out = append(w.out, "null"...)
	case avro.Boolean:
		w.boolean()
	case avro.Int:
		w.int(logical)
	case avro.Long:
		w.long64(logical)
	case avro.Float:
		if b := w.next(4); b != nil {
			w.float(float64(math.Float32frombits(binary.LittleEndian.Uint32(b))), 32)
		}
	case avro.Double:
		if b := w.next(8); b != nil {
			w.float(math.Float64frombits(binary.LittleEndian.Uint64(b)), 64)
		}
	case avro.String:
		w.string(w.next(w.long()))
	case avro.Bytes:
		w.bytes(s, w.next(w.long()), logical)
	case avro.Fixed:
		w.bytes(s, w.next(int64(s.(*avro.FixedSchema).Size())), logical)
	case avro.Enum:
		symbols := s.(*avro.EnumSchema).Symbols()
		if i := w.int32(); w.err == "" && (i < 0 || int(i) >= len(symbols)) {
			w.fail(fmt.Sprintf("enum index %d out of range", i))
		} else if w.err == "" {
			w.out = jsonenc.AppendString(w.out, symbols[i])
		}
	case avro.Union:
		types := s.(*avro.UnionSchema).Types()
		if i := w.long(); w.err == "" && (i < 0 || i >= int64(len(types))) {
			w.fail(fmt.Sprintf("union index %d out of range", i))
		} else if w.err == "" {
			w.value(types[i], depth)
		}
	case avro.Ref:
		w.value(s.(*avro.RefSchema).Schema(), depth)
	default: // Record, Error, Array, Map: containers
		if depth > maxDepth {
			w.fail(fmt.Sprintf("nests deeper than %d levels", maxDepth))
			return
		}
		w.container(s, depth)
	}
}

func (w *avroWriter) container(s avro.Schema, depth int) {
	switch s := s.(type) {
	case *avro.RecordSchema:
		w.out = append(w.out, '{')
		for i, f := range s.Fields() {
			if i > 0 {
				w.out = append(w.out, ',')
			}
			w.out = append(jsonenc.AppendString(w.out, f.Name()), ':')
			w.value(f.Type(), depth+1)
		}
		w.out = append(w.out, '}')
	case *avro.ArraySchema:
		w.out = append(w.out, '[')
		w.blocks(func(first bool) {
			if !first {
				w.out = append(w.out, ',')
			}
			w.value(s.Items(), depth+1)
		})
		w.out = append(w.out, ']')
	case *avro.MapSchema:
		w.out = append(w.out, '{')
		w.blocks(func(first bool) {
			if !first {
				w.out = append(w.out, ',')
			}
			w.string(w.next(w.long()))
			w.out = append(w.out, ':')
			w.value(s.Values(), depth+1)
		})
		w.out = append(w.out, '}')
	default:
		w.fail("unsupported schema type " + string(s.Type()))
	}
}

// blocks reads an array's or a map's blocks: a count (negative: followed
// by the block's byte size), the items, until a zero count. Every item
// writes output, so the output limit bounds even items of no bytes.
func (w *avroWriter) blocks(item func(first bool)) {
	first := true
	for w.err == "" {
		n := w.long()
		if n == 0 || w.err != "" {
			return
		}
		if n < 0 {
			n = -n
			w.long() // the block's size in bytes, for skipping; not needed
		}
		for ; n > 0 && w.err == ""; n-- {
			item(first)
			first = false
			if len(w.out) > w.limit {
				w.fail(fmt.Sprintf("decodes to more than %d bytes", w.limit))
			}
		}
	}
}

func (w *avroWriter) boolean() {
	switch b := w.next(1); {
	case b == nil:
	case b[0] == 0:
		w.out = append(w.out, "false"...)
	case b[0] == 1:
		w.out = append(w.out, "true"...)
	default:
		w.fail("boolean is not 0 or 1")
	}
}

func (w *avroWriter) int(logical avro.LogicalType) {
	v := w.int32()
	switch {
	case w.err != "":
	case logical == avro.Date:
		w.out = append(w.out, '"')
		w.out = time.Unix(int64(v)*86400, 0).UTC().AppendFormat(w.out, time.DateOnly)
		w.out = append(w.out, '"')
	default: // int, time-millis
		w.out = strconv.AppendInt(w.out, int64(v), 10)
	}
}

func (w *avroWriter) long64(logical avro.LogicalType) {
	v := w.long()
	if w.err != "" {
		return
	}
	var t time.Time
	layout := time.RFC3339Nano
	switch logical {
	case avro.TimestampMillis:
		t = time.UnixMilli(v)
	case avro.TimestampMicros:
		t = time.UnixMicro(v)
	case avro.LocalTimestampMillis:
		t, layout = time.UnixMilli(v), "2006-01-02T15:04:05.999999999"
	case avro.LocalTimestampMicros:
		t, layout = time.UnixMicro(v), "2006-01-02T15:04:05.999999999"
	default: // long, time-micros
		w.out = strconv.AppendInt(w.out, v, 10)
		return
	}
	w.out = append(w.out, '"')
	w.out = t.UTC().AppendFormat(w.out, layout)
	w.out = append(w.out, '"')
}

func (w *avroWriter) float(f float64, bits int) {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		w.fail("NaN or an infinity has no JSON form")
	default:
		w.out = strconv.AppendFloat(w.out, f, 'g', -1, bits)
	}
}

func (w *avroWriter) string(b []byte) {
	switch {
	case b == nil && w.err != "":
	case !utf8.Valid(b):
		w.fail("string is not valid UTF-8")
	default:
		w.out = jsonenc.AppendString(w.out, b)
	}
}

// bytes writes bytes or fixed: a decimal as its exact decimal string, else
// base64.
func (w *avroWriter) bytes(s avro.Schema, b []byte, logical avro.LogicalType) {
	if w.err != "" {
		return
	}
	w.out = append(w.out, '"')
	if logical == avro.Decimal {
		scale := s.(avro.LogicalTypeSchema).Logical().(*avro.DecimalLogicalSchema).Scale()
		w.out = appendDecimal(w.out, b, scale)
	} else {
		w.out = base64.StdEncoding.AppendEncode(w.out, b)
	}
	w.out = append(w.out, '"')
}

// appendDecimal writes the two's-complement big-endian unscaled value b
// divided by 10^scale, exactly.
func appendDecimal(out, b []byte, scale int) []byte {
	n := new(big.Int).SetBytes(b)
	if len(b) > 0 && b[0]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(b))))
	}
	if n.Sign() < 0 {
		out = append(out, '-')
		n.Neg(n)
	}
	digits := n.String()
	if scale <= 0 {
		return append(out, digits...)
	}
	if len(digits) <= scale {
		digits = strings.Repeat("0", scale-len(digits)+1) + digits
	}
	out = append(out, digits[:len(digits)-scale]...)
	out = append(out, '.')
	return append(out, digits[len(digits)-scale:]...)
}
