package soak

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
)

// TestReceiverHonoursIdempotencyKey: the first request for a key applies it
// (201), one while it is in flight is refused (409), a later one is a replay
// (200, Idempotent-Replayed: true).
func TestReceiverHonoursIdempotencyKey(t *testing.T) {
	r, err := startReceiver(200*time.Millisecond, 200*time.Millisecond, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	post := func(key string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, r.url, strings.NewReader(`{}`))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return nil
		}
		resp.Body.Close()
		return resp
	}
	var wg sync.WaitGroup
	var first *http.Response
	wg.Add(1)
	go func() { defer wg.Done(); first = post("k1") }()
	testkit.Await(t, 10*time.Second, "the first request for k1 in flight", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		k := r.keys["k1"]
		return k != nil && k.inFlight > 0
	})
	if resp := post("k1"); resp == nil || resp.StatusCode != http.StatusConflict {
		t.Errorf("duplicate in flight: %v, want 409", resp)
	}
	wg.Wait()
	if first == nil || first.StatusCode != http.StatusCreated {
		t.Fatalf("first: %v, want 201", first)
	}
	if resp := post("k1"); resp == nil || resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("later duplicate: %v, want 200 replayed", resp)
	}
	if resp := post(""); resp == nil || resp.StatusCode != http.StatusBadRequest {
		t.Errorf("no key: %v, want 400", resp)
	}
	s := r.keys["k1"]
	if s.requests != 3 || s.applied != 1 || s.replays != 1 || s.concurrent != 1 || r.noKey != 1 {
		t.Errorf("stats %+v, no key %d", *s, r.noKey)
	}
}

// TestExpectedEffectKeys: one key per first delivery of a CaseEscalated
// event; duplicates, conflicts and stale writers add none.
func TestExpectedEffectKeys(t *testing.T) {
	o := workload.Defaults()
	o.Events, o.Aggregates = 3000, 300
	recs, _ := workload.Generate(o)
	keys, err := ExpectedEffectKeys(recs)
	if err != nil {
		t.Fatal(err)
	}
	escalated := 0
	for _, r := range recs {
		if r.Kind == workload.KindEvent && strings.Contains(string(r.Value), `"eventType":"CaseEscalated"`) {
			escalated++
		}
	}
	if len(keys) == 0 || len(keys) != escalated {
		t.Fatalf("%d keys, %d first deliveries of CaseEscalated", len(keys), escalated)
	}
	for k := range keys {
		if !strings.HasPrefix(k, "notify:CASE-") || strings.HasSuffix(k, ":v1") { // version 1 is always CaseOpened
			t.Fatalf("key %q", k)
		}
	}
}
