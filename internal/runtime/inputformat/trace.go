package inputformat

import "github.com/twmb/franz-go/pkg/kgo"

// W3C Trace Context (https://www.w3.org/TR/trace-context/) header names.
// The CloudEvents distributed-tracing extension uses the same names for its
// attributes (ce_traceparent, ce_tracestate in binary mode).
const (
	HeaderTraceParent = "traceparent"
	HeaderTraceState  = "tracestate"
)

// maxTraceState is the longest tracestate carried: W3C asks vendors to
// propagate at least 512 characters; a longer one is dropped rather than
// cut mid-entry.
const maxTraceState = 512

// TraceContext is the W3C trace context a record carries, to be carried on
// to its outputs and calls. Parent is a valid traceparent or nil (then
// State is nil too). The slices alias the record (or its decoded value):
// copy them to keep them past the record's processing.
type TraceContext struct {
	Parent []byte // "00-<trace-id>-<parent-id>-<flags>"
	State  []byte // the vendor entries, when present and well-formed
}

// IsZero reports whether no trace context was found.
func (t TraceContext) IsZero() bool { return t.Parent == nil }

// TraceID is the trace id, 32 lower-case hex digits; "" when none.
func (t TraceContext) TraceID() string {
	if t.Parent == nil {
		return ""
	}
	return string(t.Parent[3:35])
}

// SpanID is the parent span id, 16 lower-case hex digits; "" when none.
func (t TraceContext) SpanID() string {
	if t.Parent == nil {
		return ""
	}
	return string(t.Parent[36:52])
}

// traceFromHeaders is the trace context of the traceparent and tracestate
// headers. It runs on every record of the envelope format, so it only
// compares names until it finds one.
func traceFromHeaders(hs []kgo.RecordHeader) TraceContext {
	var tp, ts []byte
	for i := range hs {
		switch hs[i].Key {
		case HeaderTraceParent:
			tp = hs[i].Value
		case HeaderTraceState:
			ts = hs[i].Value
		}
	}
	if tp == nil {
		return TraceContext{}
	}
	return newTraceContext(tp, ts)
}

// newTraceContext validates traceparent as W3C Trace Context level 1 says
// a receiver must: an invalid one is ignored (with its tracestate), never
// an error, since tracing is advisory. A future version (not 00, not ff)
// is read by its version-00 prefix.
func newTraceContext(tp, ts []byte) TraceContext {
	if !validTraceParent(tp) {
		return TraceContext{}
	}
	t := TraceContext{Parent: tp}
	if validTraceState(ts) {
		t.State = ts
	}
	return t
}

func validTraceParent(tp []byte) bool {
	if len(tp) < 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' {
		return false
	}
	ver := tp[0:2]
	if !isLowerHex(ver) || string(ver) == "ff" {
		return false
	}
	if string(ver) == "00" && len(tp) != 55 {
		return false
	}
	if len(tp) > 55 && tp[55] != '-' {
		return false
	}
	traceID, parentID, flags := tp[3:35], tp[36:52], tp[53:55]
	return isLowerHex(traceID) && !allZero(traceID) && isLowerHex(parentID) && !allZero(parentID) && isLowerHex(flags)
}

func validTraceState(ts []byte) bool {
	if len(ts) == 0 || len(ts) > maxTraceState {
		return false
	}
	for _, c := range ts {
		if c < 0x20 || c > 0x7e {
			return false
		}
	}
	return true
}

func isLowerHex(b []byte) bool {
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != '0' {
			return false
		}
	}
	return true
}
