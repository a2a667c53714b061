package soak_test

import (
	"context"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/soak"
)

var (
	soakEvents = flag.Int("soak.events", 20000, "unique events of TestSoakCI")
	soakKills  = flag.Int("soak.kills", 6, "SIGKILLs of TestSoakCI")
	soakSeed   = flag.Uint64("soak.seed", 20260701, "seed of TestSoakCI")
)

func TestMain(m *testing.M) {
	soak.BrokerChild() // this test binary doubles as the broker process when `projector broker` is missing
	os.Exit(m.Run())
}

// TestSoakCI is the soak at CI size: the real binary against a broker in
// another process, ≥ 20k events, ≥ 5 SIGKILLs at random moments and one
// broker restart under load; every checker must come back zero.
func TestSoakCI(t *testing.T) {
	if testing.Short() {
		t.Skip("soak: skipped in -short mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := soak.Run(ctx, soak.Options{
		Events: *soakEvents, Kills: *soakKills, Seed: *soakSeed, BrokerRestarts: 1,
		Dir: t.TempDir(), Log: testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", res.Figure)
	t.Logf("took %s; %d kills landed between a Kafka commit and the Pebble write; worker exits not caused by the soak: %v",
		res.Took.Round(time.Second), res.KillsBetweenCommitAndPebble, res.WorkerExits)
	if res.Figure.Crashes < 5 || res.Figure.Events < 20000 {
		t.Errorf("too small for CI: %d crashes, %d events", res.Figure.Crashes, res.Figure.Events)
	}
	if !res.Figure.OK() || !res.Checked.OK() {
		t.Fatalf("soak checks failed: %s", res.Checked)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p[:len(p)-1])); return len(p), nil }
