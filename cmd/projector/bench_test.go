package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestBenchSmall runs `projector bench` in-process at a small size (the CI
// size), with the two-record floor: the rates, the ratios, the latencies,
// the records written and CPU per input record, the peak RSS and correct
// outcome counts must be reported. 4,000 events (about 4,400 records, in
// several transactions per partition) give every outcome but failed a
// nonzero count (stale, conflict and invalid are 0.1% each): the test checks
// the report, not the rates, so it runs no larger than that.
func TestBenchSmall(t *testing.T) {
	const events = 4000
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := runBench(ctx, []string{"--events", strconv.Itoa(events), "--aggregates", strconv.Itoa(events / 10), "--batch", "500",
		"--floor-records", "2", "--dir", t.TempDir(), "--quiet"}, &stdout, &stderr)
	out := stdout.String()
	t.Logf("output:\n%s\nstderr:\n%s", out, stderr.String())
	if err != nil {
		t.Fatalf("runBench: %v", err)
	}
	rate := `[0-9][0-9,]*`
	for _, re := range []string{
		`(?m)^\s*1\s+transport floor\s+` + rate + `\s+\S+\s+` + rate + `\s`,
		`(?m)^\s*1\s+transport floor ×2\s+` + rate + `\s+\S+\s+` + rate + `\s.*\s[0-9]+\.[0-9]{3}\s*$`,
		`(?m)^\s*1\s+pipeline\s+` + rate + `\s+\S+\s+` + rate + `\s.*\s[0-9]+\.[0-9]{3}\s*$`,
		`ratio pipeline/transport floor: [0-9]+\.[0-9]{3} \(median of 1 run\(s\)\)`,
		`ratio transport floor ×2/transport floor: [0-9]+\.[0-9]{3} \(median\)`,
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
	// Records written per input record: exactly 1 and 2 for the floors; the
	// pipeline writes a projection record per applied event plus changelog
	// and dead-letter records. CPU per record and cores are positive.
	cols := regexp.MustCompile(`(?m)^\s*1\s+(transport floor ×2|transport floor|pipeline)\s+.*\s([0-9]+\.[0-9]{2})\s+([0-9]+\.[0-9]{2})µs\s+([0-9]+\.[0-9]{2})\s`)
	written := map[string]float64{}
	for _, m := range cols.FindAllStringSubmatch(out, -1) {
		w, _ := strconv.ParseFloat(m[2], 64)
		cpu, _ := strconv.ParseFloat(m[3], 64)
		cores, _ := strconv.ParseFloat(m[4], 64)
		written[m[1]] = w
		if cpu <= 0 || cores <= 0 {
			t.Errorf("%s: cpu/rec %s µs, cores %s: want positive", m[1], m[3], m[4])
		}
	}
	if len(written) != 3 {
		t.Fatalf("written/cpu/cores columns found for %d phases, want 3", len(written))
	}
	if written["transport floor"] != 1 || written["transport floor ×2"] != 2 {
		t.Errorf("floors wrote %.2f and %.2f records per input record, want 1 and 2", written["transport floor"], written["transport floor ×2"])
	}
	m := regexp.MustCompile(`(?m)^input: ([0-9,]+) records`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no input line in the output")
	}
	input, _ := strconv.Atoi(strings.ReplaceAll(m[1], ",", ""))
	if w := written["pipeline"]; input <= events || w <= float64(events)/float64(input) || w > 3 {
		t.Errorf("pipeline wrote %.2f records per input record, want more than its applied share and at most 3", w)
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
		{"ingress", "--clients", "0"},
		{"ingress", "--requests", "0"},
		{"ingress", "--bogus"},
		{"ingress", "--auth", "basic"},
		{"restore", "--aggregates", "0"},
		{"restore", "--aggregates", "1000,-5"},
		{"restore", "--runs", "0"},
		{"restore", "--partitions", "2000"},
		{"restore", "--bogus"},
		{"restore", "--standby", "--session-timeout", "-1s"},
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
	stdout.Reset()
	if err := runBench(context.Background(), []string{"restore", "--help"}, &stdout, &bytes.Buffer{}); err == nil ||
		!strings.Contains(stdout.String(), "projector bench restore --aggregates") {
		t.Errorf("restore --help: %v, %q", err, stdout.String())
	}
}
