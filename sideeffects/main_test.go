package sideeffects_test

import (
	"flag"
	"os"
	"testing"

	"github.com/projector-dev/projector/internal/harness/testkit"
)

// TestMain lets four parallel tests run at once: they wait on group
// sessions, held transactions and webhooks hung to their timeouts far more
// than they compute (TestExecutorZombieCannotCommit's two cuts wait out a
// 6 s session each).
func TestMain(m *testing.M) {
	flag.Parse()
	testkit.WaitingParallel(4)
	os.Exit(m.Run())
}
