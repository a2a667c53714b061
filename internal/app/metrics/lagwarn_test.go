package metrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLagRefreshWarnsOnlyWhenFailuresPersist: a missing topic and a single
// failed refresh (routine while a worker starts or a group rebalances) log
// no WARN but are counted; LagWarnAfter failures in a row log exactly one
// WARN, and a success resets the streak.
func TestLagRefreshWarnsOnlyWhenFailuresPersist(t *testing.T) {
	p0 := TopicPartition{"events", 0}
	// Script of refresh results, one per call.
	script := []error{
		fmt.Errorf("metrics: lag: events/-1: end offset: %w", kerr.UnknownTopicOrPartition),
		nil,
		errors.New("coordinator loading"), // one failure: no WARN
		nil,
		errors.New("down"), errors.New("down"), errors.New("down"), errors.New("down"), // streak of 4: one WARN
		nil,
	}
	lag := &fakeLag{fn: func(call int) (map[TopicPartition]int64, error) {
		if err := script[call-1]; err != nil {
			return nil, err
		}
		return map[TopicPartition]int64{p0: int64(call)}, nil
	}}
	var logs lockedBuffer
	reg, m, f := newTest(t, Options{Lag: lag, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	f.assigned = nil
	warns := func() int { return strings.Count(logs.String(), "level=WARN") }
	for call := 1; call <= 4; call++ {
		m.refreshLag(context.Background())
	}
	if w := warns(); w != 0 {
		t.Fatalf("after a missing topic and one failed refresh: %d WARN lines:\n%s", w, logs.String())
	}
	if n := series(t, reg)["projector_consumer_lag_errors_total"]; n != 1 {
		t.Errorf("projector_consumer_lag_errors_total %v after one failure, want 1 (a missing topic is not a failure)", n)
	}
	for call := 5; call <= 8; call++ {
		m.refreshLag(context.Background())
		if want := map[bool]int{true: 1, false: 0}[call-4 >= LagWarnAfter]; warns() != want {
			t.Fatalf("after %d consecutive failures: %d WARN lines, want %d:\n%s", call-4, warns(), want, logs.String())
		}
	}
	m.refreshLag(context.Background())
	if !strings.Contains(logs.String(), "consumer lag refresh recovered") {
		t.Errorf("no INFO line when the refresh recovered:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "level=DEBUG msg=\"consumer lag refresh failed\"") {
		t.Errorf("the single failure was not logged at debug:\n%s", logs.String())
	}
}
