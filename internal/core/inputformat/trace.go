package inputformat

import (
	"encoding/binary"

	"github.com/twmb/franz-go/pkg/kgo"
)

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

// Headers appends t as the traceparent and tracestate record headers (the
// W3C Trace Context Kafka convention, the one OpenTelemetry's Kafka
// instrumentations use) to hs; hs unchanged when t is zero. The values
// alias t.
func (t TraceContext) Headers(hs []kgo.RecordHeader) []kgo.RecordHeader {
	if t.Parent == nil {
		return hs
	}
	if hs == nil {
		hs = make([]kgo.RecordHeader, 0, 2) // one allocation for both
	}
	hs = append(hs, kgo.RecordHeader{Key: HeaderTraceParent, Value: t.Parent})
	if t.State != nil {
		hs = append(hs, kgo.RecordHeader{Key: HeaderTraceState, Value: t.State})
	}
	return hs
}

// TraceFromHeaders is the trace context of a record's traceparent and
// tracestate headers, validated (ParseTrace); zero when there is none or
// it is invalid. The slices alias the headers.
func TraceFromHeaders(hs []kgo.RecordHeader) TraceContext { return traceFromHeaders(hs) }

// ParseTrace is the trace context of a traceparent and a tracestate value
// (an HTTP request's headers, say), validated as W3C Trace Context asks of
// a receiver: an invalid traceparent gives the zero context (its tracestate
// is dropped with it), an invalid tracestate is dropped alone. The slices
// alias tp and ts.
func ParseTrace(tp, ts []byte) TraceContext {
	if tp == nil {
		return TraceContext{}
	}
	return newTraceContext(tp, ts)
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

// lowerHex marks the lower-case hex digits.
var lowerHex = func() (t [256]bool) {
	for _, c := range "0123456789abcdef" {
		t[c] = true
	}
	return t
}()

// isLowerHex reports whether b is all lower-case hex digits. It checks
// eight bytes at a time: a traceparent header then costs the envelope path
// about 520 instructions per record, against 700 (7% of its decode) a byte
// at a time (callgrind, docs/performance.md).
func isLowerHex(b []byte) bool {
	for len(b) >= 8 {
		x := binary.LittleEndian.Uint64(b)
		if x&highs != 0 || between(x, '0'-1, '9'+1)|between(x, 'a'-1, 'f'+1) != highs {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if !lowerHex[c] {
			return false
		}
	}
	return true
}

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// between sets the high bit of each byte of x that is strictly between lo
// and hi, for x whose bytes are all below 0x80 and 0 <= lo < hi <= 128
// ("Determine if a word has a byte between m and n", Bit Twiddling Hacks).
// Neither sum borrows or carries across bytes: (127+hi) - v >= 0 and
// v + (127-lo) <= 254 for every byte v <= 127, so each byte's high bit
// answers for that byte alone: (127+hi) - v >= 128 iff v < hi, and
// v + (127-lo) >= 128 iff v > lo.
func between(x, lo, hi uint64) uint64 {
	v := x & (ones * 127)
	return (ones*(127+hi) - v) & (v + ones*(127-lo)) & highs
}

const zeros = "00000000000000000000000000000000"

func allZero(b []byte) bool { return len(b) <= len(zeros) && string(b) == zeros[:len(b)] }
