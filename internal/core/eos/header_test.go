package eos

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/state"
)

func TestHeaderValueBounded(t *testing.T) {
	if got := string(HeaderValue("short")); got != "short" {
		t.Errorf("short value changed: %q", got)
	}
	exact := strings.Repeat("a", MaxHeaderBytes)
	if got := string(HeaderValue(exact)); got != exact {
		t.Errorf("a value of exactly MaxHeaderBytes was cut")
	}
	long := strings.Repeat("é", 600<<10)
	got := HeaderValue(long)
	if len(got) > MaxHeaderBytes || !strings.HasSuffix(string(got), TruncatedMark) || !utf8.Valid(got) {
		t.Errorf("long value: %d bytes, suffix mark %v, valid UTF-8 %v", len(got), strings.HasSuffix(string(got), TruncatedMark), utf8.Valid(got))
	}
	if MaxBatchBytes(1<<20) <= 1<<20 || MaxBatchBytes(1<<10) <= MaxDeadLetterBytes {
		t.Errorf("MaxBatchBytes leaves no room: %d, %d", MaxBatchBytes(1<<20), MaxBatchBytes(1<<10))
	}
}

// TestDeadLetterKeepsHeaders: a dead letter keeps the original record's
// headers before its own, leaves out originals named as its own (one
// reason a reader can trust), and keeps at most MaxDeadLetterHeaderBytes of
// them, counting the rest; the whole record stays within MaxBatchBytes of
// the smallest record limit.
func TestDeadLetterKeepsHeaders(t *testing.T) {
	var got []*kgo.Record
	b := newTxnBatches(nil, time.Time{}, "in.dlq", func(r *kgo.Record) { got = append(got, r) }, nil)
	id := state.Task{Topic: "in", Partition: 2}
	original := []kgo.RecordHeader{
		{Key: "ce_id", Value: []byte("e-1")}, {Key: "ce_specversion", Value: []byte("1.0")},
		{Key: HeaderReason, Value: []byte("forged")},
	}
	for range 2000 { // many small headers: their overhead counts too
		original = append(original, kgo.RecordHeader{Key: "x", Value: []byte("y")})
	}
	original = append(original, kgo.RecordHeader{Key: "big", Value: make([]byte, 600<<10)})
	b.DeadLetterWithHeaders(id, 7, []byte("k"), make([]byte, 700<<10), original, "invalid:value", "why")
	if len(got) != 1 {
		t.Fatalf("%d records produced", len(got))
	}
	r := got[0]
	hs := map[string][]string{}
	kept := 0
	for _, h := range r.Headers {
		hs[h.Key] = append(hs[h.Key], string(h.Value))
		if h.Key == "x" || h.Key == "ce_id" || h.Key == "ce_specversion" {
			kept += len(h.Key) + len(h.Value) + headerOverhead
		}
	}
	if r.Headers[0].Key != "ce_id" || r.Headers[1].Key != "ce_specversion" {
		t.Errorf("the original headers do not come first: %q, %q", r.Headers[0].Key, r.Headers[1].Key)
	}
	if v := hs[HeaderReason]; len(v) != 1 || v[0] != "invalid:value" {
		t.Errorf("%s headers %q, want only the dead letter's", HeaderReason, v)
	}
	if kept > MaxDeadLetterHeaderBytes {
		t.Errorf("kept %d bytes of original headers, over %d", kept, MaxDeadLetterHeaderBytes)
	}
	if len(hs["big"]) != 0 || len(hs[HeaderHeadersDropped]) != 1 || hs[HeaderHeadersDropped][0] == "0" {
		t.Errorf("big header kept %d, dropped count %q", len(hs["big"]), hs[HeaderHeadersDropped])
	}
	size := len(r.Key) + len(r.Value) + RecordOverhead
	for _, h := range r.Headers {
		size += len(h.Key) + len(h.Value) + headerOverhead
	}
	if limit := MaxBatchBytes(1 << 10); size > limit {
		t.Errorf("the dead letter is %d bytes, over the smallest batch limit %d", size, limit)
	}
	t.Logf("kept %d bytes of original headers, dropped %s; the dead letter is %d bytes", kept, hs[HeaderHeadersDropped][0], size)
}
