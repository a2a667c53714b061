package sideeffectstest

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// IdemReceiver is a webhook receiver that implements Idempotency-Key the way
// real ones do: the first request of a key applies the effect and answers
// 201; a duplicate while that request is still being processed answers 409
// ("in progress"); a later duplicate answers 200 with Idempotent-Replayed:
// true. Unlike the tests' receiver it does not hide a concurrent duplicate:
// an executor that records the 409 as failed has failed a key whose effect
// happened.
type IdemReceiver struct {
	URL   string
	delay func() time.Duration

	mu   sync.Mutex
	keys map[string]*IdemKey
}

// IdemKey is what an IdemReceiver saw of one key.
type IdemKey struct {
	Requests  int
	Created   int // 201: the request that applied the effect
	Conflicts int // 409: arrived while another request of the key was open
	Replays   int // 200 with Idempotent-Replayed
	Open      int // requests being processed now
	MaxOpen   int // the most ever open at once
	// ByPath counts the requests by URL path: a test gives each caller
	// (executor instance) its own path.
	ByPath map[string]int
}

// NewIdemReceiver starts a receiver that takes delay() to process each
// first or replayed request.
func NewIdemReceiver(t testing.TB, delay func() time.Duration) *IdemReceiver {
	rc := &IdemReceiver{delay: delay, keys: map[string]*IdemKey{}}
	srv := httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(srv.Close)
	rc.URL = srv.URL
	return rc
}

func (rc *IdemReceiver) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	key := r.Header.Get("Idempotency-Key")
	rc.mu.Lock()
	k := rc.keys[key]
	if k == nil {
		k = &IdemKey{ByPath: map[string]int{}}
		rc.keys[key] = k
	}
	k.Requests++
	k.ByPath[r.URL.Path]++
	busy := k.Open > 0
	k.Open++
	k.MaxOpen = max(k.MaxOpen, k.Open)
	applies := !busy && k.Created == 0
	switch {
	case busy:
		k.Conflicts++
	case applies:
		k.Created++ // the effect happens now, whatever becomes of the answer
	default:
		k.Replays++
	}
	rc.mu.Unlock()
	defer func() {
		rc.mu.Lock()
		k.Open--
		rc.mu.Unlock()
	}()
	if busy {
		http.Error(w, "a request with this Idempotency-Key is in progress", http.StatusConflict)
		return
	}
	// The work goes on when the client gives up, as it does in a receiver.
	time.Sleep(rc.delay())
	w.Header().Set("Content-Type", "application/json")
	if applies {
		w.WriteHeader(http.StatusCreated)
	} else {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	fmt.Fprintf(w, `{"id":"ref-%s"}`, key)
}

// Key returns what the receiver saw of key.
func (rc *IdemReceiver) Key(key string) IdemKey {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if k := rc.keys[key]; k != nil {
		return k.copy()
	}
	return IdemKey{}
}

func (k *IdemKey) copy() IdemKey {
	c := *k
	c.ByPath = maps.Clone(k.ByPath)
	return c
}

// Keys returns what the receiver saw, by key.
func (rc *IdemReceiver) Keys() map[string]IdemKey {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	m := make(map[string]IdemKey, len(rc.keys))
	for key, k := range rc.keys {
		m[key] = k.copy()
	}
	return m
}
