package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

func TestBenchLatencyUsage(t *testing.T) {
	for _, args := range [][]string{
		{"latency", "--loads", "0"},
		{"latency", "--loads", "10,2000"},
		{"latency", "--rate", "-1"},
		{"latency", "--warmup", "30s", "--duration", "20s"},
		{"latency", "--runs", "0"},
		{"latency", "--duplicates", "2"},
		{"latency", "--bogus"},
		{"latency", "extra"},
	} {
		err := runBench(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("runBench %q: got %v, want a usage error", args, err)
		}
	}
	var stdout bytes.Buffer
	if err := runBench(context.Background(), []string{"latency", "--help"}, &stdout, &bytes.Buffer{}); err == nil ||
		!strings.Contains(stdout.String(), "--loads") || !strings.Contains(stdout.String(), "projector bench latency --rate") {
		t.Errorf("--help: %v, %q", err, stdout.String())
	}
}
