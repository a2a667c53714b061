package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/config"
	"github.com/projector-dev/projector/sideeffects"
)

// demoUnknownKey is the idempotency key of CASE-1's SLA-breach email.
const demoUnknownKey = "email:case:CASE-1:sla-breach:v3"

// demoSink is the demo's webhook receiver. It honours Idempotency-Key: a key
// is applied once; hang makes the first call of one key apply and then stall
// past the webhook timeout (an unknown outcome).
type demoSink struct {
	*httptest.Server
	mu      sync.Mutex
	reqs    map[string]int
	applied map[string]bool
}

func newDemoSink(hangKey string) *demoSink {
	s := &demoSink{reqs: map[string]int{}, applied: map[string]bool{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		_, _ = io.Copy(io.Discard, r.Body)
		s.mu.Lock()
		s.reqs[key]++
		n := s.reqs[key]
		s.applied[key] = true
		s.mu.Unlock()
		if key == hangKey && n == 1 {
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"msg-%d"}`, n)
	}))
	return s
}

func (s *demoSink) requests(key string) int { s.mu.Lock(); defer s.mu.Unlock(); return s.reqs[key] }
func (s *demoSink) keys() int               { s.mu.Lock(); defer s.mu.Unlock(); return len(s.reqs) }
func (s *demoSink) appliedKeys() int        { s.mu.Lock(); defer s.mu.Unlock(); return len(s.applied) }
func (s *demoSink) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.reqs {
		n += v
	}
	return n
}
func (s *demoSink) maxRequests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := 0
	for _, v := range s.reqs {
		m = max(m, v)
	}
	return m
}

// printLedger prints the demo key's ledger entry.
func printLedger(ctx context.Context, w *tabwriter.Writer, opts []kgo.Opt, cfg *config.Config) error {
	entries, err := sideeffects.ReadLedger(ctx, opts, cfg.Name, cfg.Kafka.EffectsTopic)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Key != demoUnknownKey {
			continue
		}
		status := e.Status.String()
		if e.Resolution != nil {
			status += " (resolved: " + e.Resolution.Note + ")"
		}
		fmt.Fprintf(w, "   %s\t%s\tattempts %d\t%s\n", e.Key, e.Effect, e.Attempts, status)
	}
	return w.Flush()
}
