package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestBenchSmall runs `projector bench` in-process at a small size (the CI
// size): both rates, the ratio, the latencies, the peak RSS and correct
// outcome counts must be reported.
func TestBenchSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := runBench(ctx, []string{"--events", "20000", "--aggregates", "2000", "--batch", "1000",
		"--dir", t.TempDir(), "--quiet"}, &stdout, &stderr)
	out := stdout.String()
	t.Logf("output:\n%s\nstderr:\n%s", out, stderr.String())
	if err != nil {
		t.Fatalf("runBench: %v", err)
	}
	rate := `[0-9][0-9,]*`
	for _, re := range []string{
		`(?m)^\s*1\s+transport floor\s+` + rate + `\s+\S+\s+` + rate + `\s`,
		`(?m)^\s*1\s+pipeline\s+` + rate + `\s+\S+\s+` + rate + `\s.*\s[0-9]+\.[0-9]{3}\s*$`,
		`ratio pipeline/transport floor: [0-9]+\.[0-9]{3} \(median of 1 run\(s\)\)`,
		`peak RSS: [0-9]+ MiB`,
		`outcome counts: correct in every run`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("output does not match %s", re)
		}
	}
	// Every outcome row says ok, and the counts are not trivially zero.
	for _, o := range []string{"applied", "duplicate", "stale", "held", "conflict", "invalid", "failed"} {
		m := regexp.MustCompile(`(?m)^\s*` + o + `\s+([0-9]+)\s+([0-9]+)\s+(\S+)\s*$`).FindStringSubmatch(out)
		if m == nil {
			t.Errorf("no outcome row for %s", o)
			continue
		}
		if m[1] != m[2] || m[3] != "ok" {
			t.Errorf("outcome %s: expected %s, got %s (%s)", o, m[1], m[2], m[3])
		}
		if o != "failed" && m[1] == "0" {
			t.Errorf("outcome %s: expected count is 0; the workload does not exercise it", o)
		}
	}
	// The floor's and pipeline's p50/p99 are positive.
	if regexp.MustCompile(`\s0\.0ms`).MatchString(out) {
		t.Errorf("a transaction latency is zero")
	}
}

func TestBenchUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--events", "0"},
		{"--duplicates", "1.5"},
		{"--events", "10", "--aggregates", "20"},
		{"--bogus"},
		{"extra"},
	} {
		err := runBench(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{})
		var ue usageError
		if !errors.As(err, &ue) {
			t.Errorf("runBench %q: got %v, want a usage error", args, err)
		}
	}
	var stdout bytes.Buffer
	if err := runBench(context.Background(), []string{"--help"}, &stdout, &bytes.Buffer{}); err == nil || !strings.Contains(stdout.String(), "--cpuprofile") {
		t.Errorf("--help: %v, %q", err, stdout.String())
	}
}
