package soak_test

import (
	"context"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/harness/soak"
	"github.com/projector-dev/projector/internal/harness/testsize"
)

var (
	soakEvents = flag.Int("soak.events", ciEvents(), "unique events of TestSoakCI (default 6000, 30000 with PROJECTOR_TEST_SIZE=full)")
	soakKills  = flag.Int("soak.kills", 20, "SIGKILLs of TestSoakCI")
	soakSeed   = flag.Uint64("soak.seed", 20260701, "seed of TestSoakCI")
)

// ciEvents is TestSoakCI's default size: 30k events at full size, a fifth
// of that at the tests' small size (the default: testsize), as the
// integration workloads run there (README).
// The kills, their moments and the broker restart do not shrink: the input
// is paced over the same 20 lives (Options.Rate), so every kill still lands
// while offsets move with input pending; what shrinks is the volume the
// harness generates, folds and checks.
func ciEvents() int {
	if testsize.Small() {
		return 30000 / 5
	}
	return 30000
}

// receiverMin is the fastest answer of the soak's webhook receiver (the
// slowest is 3×): 20 ms at 30k events, 100 ms at the fifth, where the calls
// come five times less often – as many calls stay in flight at a kill, so
// that as many kills land inside a webhook call (unknown outcomes).
var receiverMin = 20 * time.Millisecond * time.Duration(30000/ciEvents())

func TestMain(m *testing.M) {
	soak.BrokerChild() // this test binary doubles as the broker process when `projector broker` is missing
	os.Exit(m.Run())
}

// TestSoakCI is the soak at CI size, with default group session settings:
// the real binary against a broker in another process, 6k events (30k at
// full size: ciEvents) with the
// side-effect executor calling a webhook for every applied CaseEscalated,
// ≥ 20 SIGKILLs at random moments under load and one broker restart.
// Every checker must come back zero (no duplicate or lost output, no
// projection diff, no second 2xx for a key without an unknown attempt before
// it, no call without a committed start, no two requests for a key at once,
// every expected key applied and settled), each restart must commit its
// first transaction within 5s of its process start (p99), and ≥ 90% of the
// kills must land while the committed offsets are moving.
func TestSoakCI(t *testing.T) {
	if testing.Short() {
		t.Skip("soak: skipped in -short mode")
	}
	const restartBound = 5 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	res, err := soak.Run(ctx, soak.Options{
		Events: *soakEvents, Kills: *soakKills, Seed: *soakSeed, BrokerRestarts: 1,
		KillMin: 300 * time.Millisecond, KillMax: 1500 * time.Millisecond,
		ReceiverMin: receiverMin, ReceiverMax: 3 * receiverMin,
		RestartBound: restartBound,
		// With 20 restarts the nearest-rank p99 is the slowest, so one
		// restart over the bound fails the test: stop killing then rather
		// than wait out a group session per kill.
		StopAfterSlow: 1,
		Dir:           t.TempDir(), Log: testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", res.Figure)
	t.Logf("took %s; %d kills landed between a Kafka commit and the Pebble write; worker exits not caused by the soak: %v",
		res.Took.Round(time.Second), res.KillsBetweenCommitAndPebble, res.WorkerExits)
	t.Logf("restart → first commit: %s; samples: %s", res.RestartLatency, res.RestartLatency.SamplesString())
	t.Logf("kills while offsets moving: %d/%d (%.0f%%); with input pending: %d/%d; input %d records/s while killing",
		res.KillsMoving, len(res.Kills), 100*res.KillsMovingShare(), res.KillsPending, len(res.Kills), res.Rate)
	if res.StoppedEarly != "" {
		t.Errorf("kills stopped early: %s", res.StoppedEarly)
	}
	if len(res.Kills) < 20 || res.Figure.Events < *soakEvents {
		t.Errorf("too small for CI: %d SIGKILLs (want ≥ 20), %d events", len(res.Kills), res.Figure.Events)
	}
	if res.RestartLatency.N < len(res.Kills) {
		t.Errorf("%d of %d restarts measured", res.RestartLatency.N, len(res.Kills))
	}
	if res.RestartLatency.P99 > restartBound {
		t.Errorf("restart → first commit p99 %s, want ≤ %s", res.RestartLatency.P99.Round(time.Millisecond), restartBound)
	}
	if share := res.KillsMovingShare(); share < 0.9 {
		t.Errorf("%.0f%% of the kills landed while offsets were moving, want ≥ 90%%", 100*share)
	}
	if res.Figure.Effects == nil {
		t.Errorf("the soak ran without side effects")
	}
	if !res.Figure.OK() || !res.Checked.OK() {
		t.Fatalf("soak checks failed: %s", res.Checked)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p[:len(p)-1])); return len(p), nil }
