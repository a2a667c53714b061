package eos

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestWaitReady: WaitReady returns once the loop is ready, at once while it
// is, waits again once it is not, and returns ctx's error if it never is.
func TestWaitReady(t *testing.T) {
	s := NewStats()
	ctx := context.Background()
	wait := func() chan error {
		ch := make(chan error, 1)
		go func() { ch <- s.WaitReady(ctx) }()
		return ch
	}
	first := wait()
	select {
	case err := <-first:
		t.Fatalf("WaitReady returned %v before the loop was ready", err)
	default:
	}
	s.setReadiness(true, "")
	if err := <-first; err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	if err := s.WaitReady(ctx); err != nil {
		t.Fatalf("WaitReady while ready: %v", err)
	}
	s.setReadiness(false, "rebalancing")
	again := wait()
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if err := s.WaitReady(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReady while not ready: %v, want the context's deadline", err)
	}
	s.setReadiness(true, "")
	if err := <-again; err != nil {
		t.Fatalf("WaitReady after ready again: %v", err)
	}
}
