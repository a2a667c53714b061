package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/harness/soak"
)

// TestRestoreBenchSmall runs `projector bench restore` at a small size, so
// that it cannot rot: the real binary, started fresh on an empty state.dir,
// becomes ready and has restored exactly the changelog's committed records
// (Restore counts them read_committed after the setup); it exits 0 on
// SIGTERM, and the figures are there. A second invocation on the same
// directory reuses the setup.
func TestRestoreBenchSmall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin, err := soak.Build(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	const n = 10_000
	res, err := Restore(ctx, RestoreOptions{Aggregates: []int{n}, Partitions: 2, Runs: 2, Chunk: 4_000, Binary: bin, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	s := res.Sizes[0]
	if s.Input != n || len(s.Runs) != 2 {
		t.Fatalf("%d input records, %d runs; want %d, 2", s.Input, len(s.Runs), n)
	}
	// Every aggregate has a record on the changelog (and there are dedup
	// segments besides): a changelog the setup did not fill fails here,
	// not only as a restore of nothing.
	if s.Changelog < n {
		t.Fatalf("the changelog holds %d records, want ≥ %d (one per aggregate)", s.Changelog, n)
	}
	for i, r := range s.Runs {
		if r.Restored != s.Changelog || r.Ready <= 0 || r.ReadyRSS <= 0 || r.PeakRSS < r.ReadyRSS || r.StateBytes <= 0 || r.StateBytes < r.SSTBytes {
			t.Fatalf("run %d: %+v (changelog %d)", i+1, r, s.Changelog)
		}
	}
	var out bytes.Buffer
	res.Print(&out)
	if !strings.Contains(out.String(), "median per size") || !strings.Contains(out.String(), "every run restored exactly") {
		t.Fatalf("report:\n%s", out.String())
	}
	t.Log("\n" + out.String())

	// A second invocation on the same --dir reuses the setup (its
	// figures are the recorded ones, the same changelog) and restores it
	// again; one with other options refuses the directory.
	again, err := Restore(ctx, RestoreOptions{Aggregates: []int{n}, Partitions: 2, Runs: 1, Chunk: 4_000, Binary: bin, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Err(); err != nil {
		t.Fatal(err)
	}
	a := again.Sizes[0]
	if a.Process != s.Process || a.Changelog != s.Changelog || len(a.Runs) != 1 || a.Runs[0].Floor.Records != s.Changelog {
		t.Fatalf("second invocation: setup processed in %s with %d changelog records, %d runs (floor read %+v); want the first's setup (%s, %d) reused and one run",
			a.Process, a.Changelog, len(a.Runs), a.Runs, s.Process, s.Changelog)
	}
	if _, err := Restore(ctx, RestoreOptions{Aggregates: []int{n}, Partitions: 2, Runs: 1, Chunk: 4_000, Seed: 9, Binary: bin, Dir: dir}); err == nil || !strings.Contains(err.Error(), "not of these options") {
		t.Fatalf("a setup of another seed in the same directory: %v, want it refused", err)
	}
}
