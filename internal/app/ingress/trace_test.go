package ingress

import (
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTraceOf: the request's W3C trace context becomes its claim record's
// headers as W3C Trace Context says a receiver reads it: a traceparent
// that is invalid or given twice is ignored with its tracestate, an
// invalid tracestate alone is dropped, several tracestate headers are one
// list.
func TestTraceOf(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	h := func(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }
	for _, c := range []struct {
		name         string
		parents, tss []string
		want         []kgo.RecordHeader
	}{
		{"none", nil, nil, nil},
		{"parent", []string{tp}, nil, []kgo.RecordHeader{h("traceparent", tp)}},
		{"parent and state", []string{tp}, []string{"a=1"}, []kgo.RecordHeader{h("traceparent", tp), h("tracestate", "a=1")}},
		{"states joined", []string{tp}, []string{"a=1", "b=2"}, []kgo.RecordHeader{h("traceparent", tp), h("tracestate", "a=1,b=2")}},
		{"invalid state dropped", []string{tp}, []string{"a=\x01"}, []kgo.RecordHeader{h("traceparent", tp)}},
		{"upper-case hex", []string{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01"}, []string{"a=1"}, nil},
		{"zero trace id", []string{"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, nil, nil},
		{"twice", []string{tp, tp}, []string{"a=1"}, nil},
		{"state alone", nil, []string{"a=1"}, nil},
	} {
		r := httptest.NewRequest("POST", "/v1/events", nil)
		for _, v := range c.parents {
			r.Header.Add("traceparent", v)
		}
		for _, v := range c.tss {
			r.Header.Add("Tracestate", v)
		}
		if got := (&Server{}).traceOf(r); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: traceOf = %q, want %q", c.name, got, c.want)
		}
	}
}
