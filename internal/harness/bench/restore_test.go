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
	ctx, dir, bin := restoreBenchDir(t)
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

// TestRestoreBenchStandbySmall runs `projector bench restore --standby` at
// a small size, so that it cannot rot: worker A restores the changelog
// alone, worker B joins and keeps a standby copy of A's half, A is killed
// (SIGKILL) and B takes every partition over, restoring (almost) nothing
// of A's half – its standby had it – and exits 0 on SIGTERM. The setup
// made without --standby is reused by it.
func TestRestoreBenchStandbySmall(t *testing.T) {
	t.Parallel() // mostly waits for the killed owner's session to expire
	ctx, dir, bin := restoreBenchDir(t)
	const n = 2_000
	o := RestoreOptions{Aggregates: []int{n}, Partitions: 2, Runs: 1, Chunk: 1_000, Binary: bin, Dir: dir, SetupOnly: true}
	if _, err := Restore(ctx, o); err != nil {
		t.Fatal(err)
	}
	o.SetupOnly, o.Standby = false, true
	res, err := Restore(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	res.Print(&out)
	t.Log("\n" + out.String())
	if err := res.Err(); err != nil {
		t.Fatal(err)
	}
	s := res.Sizes[0]
	if len(s.Standby) != 1 || len(s.Runs) != 0 {
		t.Fatalf("%d standby runs, %d restore runs; want 1, 0", len(s.Standby), len(s.Runs))
	}
	r := s.Standby[0]
	// B's standby copied A's half: it read records, and B's own restore
	// did not cover the changelog. The takeover restored nothing: A was
	// idle, its partitions' changelogs did not move after the catch-up.
	if r.StandbyPartitions != 1 || r.StandbyRecords == 0 || r.BRestored >= s.Changelog || r.TakeoverRestored != 0 {
		t.Fatalf("standby run: %+v (changelog %d); want a standby of 1 partition with records, B's restore short of the changelog, 0 restored in the takeover", r, s.Changelog)
	}
	if r.AReady <= 0 || r.BReady <= 0 || r.CatchUp < r.BReady || r.StandbyDone <= 0 || r.StandbyDone > r.CatchUp || r.ToAssigned <= 0 || r.ToReady < 0 || r.TakeoverRSS <= 0 || r.BPeakRSS < r.TakeoverRSS {
		t.Fatalf("standby run: %+v: a figure is missing", r)
	}
	if !strings.Contains(out.String(), "assigned→ready") || !strings.Contains(out.String(), "the takeover restored at most 1%") {
		t.Fatalf("report:\n%s", out.String())
	}
}

// restoreBenchDir is a restore bench's context (5 minutes at most), its
// directory and the projector binary its workers run.
func restoreBenchDir(t *testing.T) (ctx context.Context, dir, bin string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	dir = t.TempDir()
	bin, err := soak.Build(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, dir, bin
}
