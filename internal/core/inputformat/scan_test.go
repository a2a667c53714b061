package inputformat

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestCheckJSONAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range []string{
		`{}`, ` [ ] `, `"a\u00e9\n"`, `-0.5e+3`, `0`, `true`, `null`, `{"a":[1,{"b":null}],"c":"\ud83d\ude00"}`,
		``, ` `, `{`, `{"a"}`, `{"a":}`, `[1,]`, `01`, `1.`, `.5`, `-`, `1e`, `"\x"`, `"\u12G4"`, "\"\x01\"", `nul`,
		`{"a":1}{}`, `[1 2]`, `{"a" 1}`, `{1:2}`, `"abc`, `tru`, `[}`, `{]`,
	} {
		got := checkJSON([]byte(s), 64) == ""
		if want := json.Valid([]byte(s)); got != want {
			t.Errorf("%q: valid %v, encoding/json says %v (%s)", s, got, want, checkJSON([]byte(s), 64))
		}
	}
	if msg := checkJSON([]byte(strings.Repeat("[", 3)+strings.Repeat("]", 3)), 2); msg != "nesting deeper than 2 levels" {
		t.Errorf("depth: %q", msg)
	}
	if msg := checkJSON([]byte(strings.Repeat("[", 2)+strings.Repeat("]", 2)), 2); msg != "" {
		t.Errorf("depth 2 at limit 2: %q", msg)
	}
}

func TestPointers(t *testing.T) {
	doc := []byte(`{"a":{"b/c":[10,{"d~e":"x"}]},"":1,"e\u0073c":"escaped name","n":null}`)
	root := rootSpan(doc)
	for _, c := range []struct {
		ptr, want string
	}{
		{"", string(doc)}, {"/a/b~1c/0", "10"}, {"/a/b~1c/1/d~0e", `"x"`}, {"/", "1"}, {"/esc", `"escaped name"`},
		{"/n", "null"}, {"/a/b~1c/2", ""}, {"/a/b~1c/01", ""}, {"/a/b~1c/-", ""}, {"/a/b~1c/+1", ""}, {"/x", ""}, {"/a/b~1c/0/deeper", ""},
	} {
		p, err := parsePointer(c.ptr)
		if err != nil {
			t.Fatalf("%q: %v", c.ptr, err)
		}
		at, msg := lookup(doc, root, p.tokens)
		got := ""
		if at.kind != kindNone {
			got = string(doc[at.start:at.end])
		}
		if got != c.want || msg != "" {
			t.Errorf("%q: got %q (%s), want %q", c.ptr, got, msg, c.want)
		}
	}
	p, _ := parsePointer("/~01")
	if !reflect.DeepEqual(p.tokens, []string{"~1"}) {
		t.Errorf("~01 decodes to %q, want ~1 (RFC 6901 §4)", p.tokens)
	}
}

func TestUnescape(t *testing.T) {
	for _, c := range []struct {
		in, want string
		ok       bool
	}{
		{`"plain"`, "plain", true}, {`"\"\\\/\b\f\n\r\t"`, "\"\\/\b\f\n\r\t", true}, {`"\u00e9\ud83d\ude00"`, "é😀", true},
		{`"\ud83d"`, "", false}, {`"\ude00"`, "", false}, {`"\ud83d\u0041"`, "", false}, {`"\ud83dx"`, "", false},
	} {
		got, ok := unescape(nil, []byte(c.in))
		if ok != c.ok || (ok && string(got) != c.want) {
			t.Errorf("%s: %q %v, want %q %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestTraceContext(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, c := range []struct {
		name, parent, state string
		wantParent, want    bool
	}{
		{"valid", tp, "a=1,b=2", true, true},
		{"no state", tp, "", true, false},
		{"future version with more fields", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future", "a=1", true, true},
		{"future version glued", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", "", false, false},
		{"version 00 longer", tp + "-x", "a=1", false, false},
		{"version ff", "ff" + tp[2:], "", false, false},
		{"upper-case hex", strings.ToUpper(tp), "", false, false},
		{"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "", false, false},
		{"zero span id", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "", false, false},
		{"short", tp[:54], "", false, false},
		{"bad separator", strings.Replace(tp, "-", "_", 1), "", false, false},
		{"state too long", tp, strings.Repeat("a", 513), true, false},
		{"state not printable", tp, "a=\x01", true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := record("", "{}", "tracestate", c.state, "traceparent", c.parent)
			got := traceFromHeaders(r.Headers)
			if (got.Parent != nil) != c.wantParent || (got.State != nil) != c.want {
				t.Fatalf("got %q %q", got.Parent, got.State)
			}
			if c.wantParent && (got.TraceID() != c.parent[3:35] || got.SpanID() != c.parent[36:52]) {
				t.Errorf("ids %s %s", got.TraceID(), got.SpanID())
			}
		})
	}
	if z := (TraceContext{}); z.TraceID() != "" || z.SpanID() != "" || !z.IsZero() {
		t.Error("zero TraceContext")
	}
}

// TestIsLowerHex compares the word-at-a-time check with a byte-at-a-time
// one for every byte value at every position of a word and of the tail.
func TestIsLowerHex(t *testing.T) {
	simple := func(b []byte) bool {
		for _, c := range b {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true
	}
	base := []byte("0123456789abcdef0a")
	for pos := range base {
		for c := 0; c < 256; c++ {
			b := append([]byte(nil), base...)
			b[pos] = byte(c)
			if got, want := isLowerHex(b), simple(b); got != want {
				t.Fatalf("%q: %v, want %v", b, got, want)
			}
		}
	}
}

// FuzzDecode: no input panics Decode in any format, every result is either
// an envelope, an invalid record or (never here: no registry) unavailable.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(orderJSON), []byte(`"1"`), []byte("application/cloudevents+json"), []byte("1.0"))
	f.Add([]byte(dbzStringPayload), []byte("k"), []byte("application/json"), []byte("1.0"))
	f.Add([]byte(`{"specversion":"1.0","id":"x","source":"/s","type":"T","subject":"s","data_base64":"e30=","sequence":"2"}`), []byte(nil), []byte("application/cloudevents+json"), []byte(""))
	f.Add([]byte("\x00\x00\x00\x00\x01\x02"), []byte("\x00\x00\x00\x00\x01"), []byte(""), []byte("1.0"))
	decoders := []*Decoder{
		mustNew(f, Options{}),
		mustNew(f, Options{Format: CloudEvents}),
		mustNew(f, Options{Format: CloudEvents, Fields: map[string]string{"aggregateId": "/data/a/0", "tenantId": "key", "payload": ""}}),
		mustNew(f, Options{Format: DebeziumOutbox, Fields: map[string]string{"aggregateVersion": "header:version"}}),
		mustNew(f, Options{Format: Mapped, Fields: orderFields}),
		mustNew(f, Options{Format: Mapped, Fields: map[string]string{"eventId": "key", "eventType": "/", "aggregateId": "/data/0", "payload": ""}}),
	}
	f.Fuzz(func(t *testing.T, value, key, contentType, spec []byte) {
		r := &kgo.Record{Key: key, Value: value, Headers: []kgo.RecordHeader{
			{Key: "content-type", Value: contentType}, {Key: "ce_specversion", Value: spec},
			{Key: "ce_source", Value: key}, {Key: "ce_id", Value: value}, {Key: "id", Value: key},
			{Key: "eventType", Value: spec}, {Key: "version", Value: key}, {Key: "ce_subject", Value: contentType},
		}}
		for _, d := range decoders {
			res, err := decodeRecord(d, context.Background(), r)
			if err != nil {
				if o := decodeOne(t, d, r); o.reason == "" {
					t.Fatalf("%s: an error that is not a dead-letter reason: %v", d.Format(), err)
				}
				continue
			}
			if d.Format() != Envelope && !json.Valid(res.Value) {
				t.Fatalf("%s: built envelope is not JSON: %s", d.Format(), res.Value)
			}
		}
	})
}
