package sideeffects

import (
	"context"
	"math/rand/v2"
	"net"
	"net/http"
	"testing"
	"time"
)

func TestWebhookClassification(t *testing.T) {
	status := func(code int, hdr ...string) behaviour {
		return func(_ *receiver, w http.ResponseWriter, _ *http.Request, _ string, _ int) bool {
			for i := 0; i+1 < len(hdr); i += 2 {
				w.Header().Set(hdr[i], hdr[i+1])
			}
			w.WriteHeader(code)
			return true
		}
	}
	body := func(code int, s string, hdr ...string) behaviour {
		return func(_ *receiver, w http.ResponseWriter, _ *http.Request, _ string, _ int) bool {
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
		want Outcome
		code int
		ref  string
	}{
		{"200 with id", nil, OutcomeSucceeded, 200, "ref-k"},
		{"201 numeric id", body(201, `{"id":42}`), OutcomeSucceeded, 201, "42"},
		{"202 request id header", body(202, `not json`, "X-Request-Id", "req-7"), OutcomeSucceeded, 202, "req-7"},
		{"204 nothing", status(204), OutcomeSucceeded, 204, ""},
		{"408", status(408), OutcomeRetryable, 408, ""},
		{"425", status(425), OutcomeRetryable, 425, ""},
		{"429", status(429), OutcomeRetryable, 429, ""},
		{"500", status(500), OutcomeRetryable, 500, ""},
		{"503", status(503), OutcomeRetryable, 503, ""},
		{"400", status(400), OutcomeFailed, 400, ""},
		{"404", status(404), OutcomeFailed, 404, ""},
		{"422", status(422), OutcomeFailed, 422, ""},
		{"302 is not followed", status(302, "Location", "/elsewhere"), OutcomeFailed, 302, ""},
		{"hang after applying", hangFirst(1), OutcomeUnknown, 0, ""},
		{"connection dropped after the request", dropFirst(1), OutcomeUnknown, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := newReceiver(t, tc.b)
			timeout := longTimeout
			if tc.want == OutcomeUnknown {
				timeout = hangTimeout
			}
			wh := &Webhook{URL: rc.srv.URL + "/notify", Timeout: timeout}
			in := testIntent(t, "k", "fx", "p")
			res := wh.Execute(context.Background(), in, in.Value)
			if res.Outcome != tc.want || res.StatusCode != tc.code || res.Ref != tc.ref {
				t.Fatalf("got %v %d %q (%v), want %v %d %q", res.Outcome, res.StatusCode, res.Ref, res.Err, tc.want, tc.code, tc.ref)
			}
			if (res.Outcome == OutcomeSucceeded) != (res.Err == nil) {
				t.Fatalf("err %v with outcome %v", res.Err, res.Outcome)
			}
			// Exactly one send per Execute: no hidden transport retry.
			if n, _ := rc.counts("k"); n != 1 {
				t.Fatalf("receiver saw %d requests", n)
			}
			if string(rc.bodies["k"]) != string(in.Value) {
				t.Fatalf("body %s", rc.bodies["k"])
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
	in := testIntent(t, "k", "fx", "p")
	res := (&Webhook{URL: "http://" + addr + "/x", Timeout: time.Second}).Execute(context.Background(), in, in.Value)
	if res.Outcome != OutcomeRetryable || res.Err == nil {
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
	res = (&Webhook{URL: "http://" + ln.Addr().String() + "/x", Timeout: 100 * time.Millisecond}).Execute(context.Background(), in, big)
	if res.Outcome != OutcomeRetryable {
		t.Fatalf("unwritten request: %v %v", res.Outcome, res.Err)
	}

	if res := (&Webhook{URL: "::not a url"}).Execute(context.Background(), in, nil); res.Outcome != OutcomeFailed {
		t.Fatalf("bad URL: %v", res.Outcome)
	}
}

func TestBackoff(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 40; n++ {
		ceil := BackoffCap
		if n <= 8 {
			ceil = BackoffBase << (n - 1)
		}
		var maxSeen time.Duration
		for range 200 {
			d := Backoff(n, rng)
			if d < 0 || d > ceil {
				t.Fatalf("Backoff(%d) = %v outside [0, %v]", n, d, ceil)
			}
			maxSeen = max(maxSeen, d)
		}
		// Full jitter spreads over the whole range.
		if maxSeen < ceil/2 {
			t.Fatalf("Backoff(%d): max of 200 draws %v, ceiling %v", n, maxSeen, ceil)
		}
	}
	if d := Backoff(0, nil); d < 0 || d > BackoffBase {
		t.Fatalf("Backoff(0) = %v", d)
	}
	if d := Backoff(1000, nil); d < 0 || d > BackoffCap {
		t.Fatalf("Backoff(1000) = %v", d)
	}
}
