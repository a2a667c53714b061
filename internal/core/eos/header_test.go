package eos

import (
	"strings"
	"testing"
	"unicode/utf8"
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
