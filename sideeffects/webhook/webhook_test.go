package webhook

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/projector-dev/projector/sideeffects/effect"
	"github.com/projector-dev/projector/sideeffects/sideeffectstest"
)

// hangTimeout is the timeout where a test wants it to expire (the receiver
// hangs); every other test uses a long one, so that a loaded machine cannot
// turn a success into an unknown outcome.
const (
	hangTimeout = 200 * time.Millisecond
	longTimeout = 10 * time.Second
)

// behaviour answers one request itself (an error status, a hang, a dropped
// connection) and returns true, or returns false for the receiver's own
// answer: 200 with {"id":"ref-KEY"}.
type behaviour func(w http.ResponseWriter, r *http.Request) bool

// receiver is a real HTTP endpoint on 127.0.0.1 that records the requests
// of each Idempotency-Key and their last body.
type receiver struct {
	srv      *httptest.Server
	behave   behaviour
	mu       sync.Mutex
	requests map[string]int
	bodies   map[string][]byte
}

func newReceiver(t *testing.T, b behaviour) *receiver {
	rc := &receiver{behave: b, requests: map[string]int{}, bodies: map[string][]byte{}}
	stop := make(chan struct{})
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		if r.Method != http.MethodPost || key == "" || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("bad request: %s key %q content type %q", r.Method, key, r.Header.Get("Content-Type"))
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		rc.mu.Lock()
		rc.requests[key]++
		rc.bodies[key] = body
		rc.mu.Unlock()
		if rc.behave != nil && rc.behave(w, r.WithContext(stopOrDone(r.Context(), stop))) {
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"ref-%s"}`, key)
	}))
	t.Cleanup(func() {
		close(stop) // releases hanging handlers so Close does not wait
		rc.srv.Close()
	})
	return rc
}

// stopOrDone is ctx, also done once stop is closed.
func stopOrDone(ctx context.Context, stop <-chan struct{}) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	return ctx
}

func (rc *receiver) counts(key string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.requests[key]
}

func (rc *receiver) body(key string) []byte {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.bodies[key]
}

// hang never answers (until the client gives up).
func hang(_ http.ResponseWriter, r *http.Request) bool {
	<-r.Context().Done()
	return true
}

// drop closes the connection without an answer.
func drop(w http.ResponseWriter, _ *http.Request) bool {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
	return true
}

func TestWebhookClassification(t *testing.T) {
	status := func(code int, hdr ...string) behaviour {
		return func(w http.ResponseWriter, _ *http.Request) bool {
			for i := 0; i+1 < len(hdr); i += 2 {
				w.Header().Set(hdr[i], hdr[i+1])
			}
			w.WriteHeader(code)
			return true
		}
	}
	body := func(code int, s string, hdr ...string) behaviour {
		return func(w http.ResponseWriter, _ *http.Request) bool {
			for i := 0; i+1 < len(hdr); i += 2 {
				w.Header().Set(hdr[i], hdr[i+1])
			}
			w.WriteHeader(code)
			w.Write([]byte(s))
			return true
		}
	}
	for _, tc := range []struct {
		name string
		b    behaviour
		want effect.Outcome
		code int
		ref  string
	}{
		{"200 with id", nil, effect.OutcomeSucceeded, 200, "ref-k"},
		{"201 numeric id", body(201, `{"id":42}`), effect.OutcomeSucceeded, 201, "42"},
		{"202 request id header", body(202, `not json`, "X-Request-Id", "req-7"), effect.OutcomeSucceeded, 202, "req-7"},
		{"204 nothing", status(204), effect.OutcomeSucceeded, 204, ""},
		{"408", status(408), effect.OutcomeRetryable, 408, ""},
		{"425", status(425), effect.OutcomeRetryable, 425, ""},
		{"429", status(429), effect.OutcomeRetryable, 429, ""},
		{"500", status(500), effect.OutcomeRetryable, 500, ""},
		{"503", status(503), effect.OutcomeRetryable, 503, ""},
		{"400", status(400), effect.OutcomeFailed, 400, ""},
		{"404", status(404), effect.OutcomeFailed, 404, ""},
		{"422", status(422), effect.OutcomeFailed, 422, ""},
		{"302 is not followed", status(302, "Location", "/elsewhere"), effect.OutcomeFailed, 302, ""},
		{"hang after applying", hang, effect.OutcomeUnknown, 0, ""},
		{"connection dropped after the request", drop, effect.OutcomeUnknown, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := newReceiver(t, tc.b)
			timeout := longTimeout
			if tc.want == effect.OutcomeUnknown {
				timeout = hangTimeout
			}
			wh := &Client{URL: rc.srv.URL + "/notify", Timeout: timeout}
			in := sideeffectstest.Intent(t, "k", "fx", "p")
			res := wh.Call(context.Background(), in, in.Value)
			if res.Outcome != tc.want || res.StatusCode != tc.code || res.Ref != tc.ref {
				t.Fatalf("got %v %d %q (%v), want %v %d %q", res.Outcome, res.StatusCode, res.Ref, res.Err, tc.want, tc.code, tc.ref)
			}
			if (res.Outcome == effect.OutcomeSucceeded) != (res.Err == nil) {
				t.Fatalf("err %v with outcome %v", res.Err, res.Outcome)
			}
			// Exactly one send per Call: no hidden transport retry.
			if n := rc.counts("k"); n != 1 {
				t.Fatalf("receiver saw %d requests", n)
			}
			if string(rc.body("k")) != string(in.Value) {
				t.Fatalf("body %s", rc.body("k"))
			}
		})
	}
}

// Nothing was sent: connection refused, or the deadline passed before the
// request was written. Both are retryable, never unknown.
func TestWebhookNotSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	in := sideeffectstest.Intent(t, "k", "fx", "p")
	res := (&Client{URL: "http://" + addr + "/x", Timeout: time.Second}).Call(context.Background(), in, in.Value)
	if res.Outcome != effect.OutcomeRetryable || res.Err == nil {
		t.Fatalf("refused: %v %v", res.Outcome, res.Err)
	}

	// A listener that accepts and never reads: with a body larger than the
	// socket buffers the request is never fully written.
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	big := make([]byte, 32<<20) // more than loopback socket buffers hold
	res = (&Client{URL: "http://" + ln.Addr().String() + "/x", Timeout: 100 * time.Millisecond}).Call(context.Background(), in, big)
	if res.Outcome != effect.OutcomeRetryable {
		t.Fatalf("unwritten request: %v %v", res.Outcome, res.Err)
	}

	if res := (&Client{URL: "::not a url"}).Call(context.Background(), in, nil); res.Outcome != effect.OutcomeFailed {
		t.Fatalf("bad URL: %v", res.Outcome)
	}
}

// A call whose context is done before it begins sends nothing and says so
// (NotSent: no attempt, the Runner withdraws it); a refused connection or
// an unwritten request is a real attempt that failed, not NotSent
// (retryable, counted against maxAttempts).
func TestWebhookContextDoneNotSent(t *testing.T) {
	var got atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { got.Add(1) }))
	defer srv.Close()
	in := sideeffectstest.Intent(t, "k", "fx", "p")
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	res := (&Client{URL: srv.URL, Timeout: time.Second}).Call(ctx, in, in.Value)
	if !res.NotSent || res.Outcome != effect.OutcomeRetryable || !errors.Is(res.Err, context.DeadlineExceeded) || got.Load() != 0 {
		t.Fatalf("expired context: %+v, %d requests at the receiver", res, got.Load())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if res := (&Client{URL: "http://" + addr + "/x", Timeout: time.Second}).Call(context.Background(), in, in.Value); res.NotSent {
		t.Fatalf("a refused connection is an attempt: %+v", res)
	}
}
