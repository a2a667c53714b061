package webhook

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/projector-dev/projector/sideeffects/effect"
	"github.com/projector-dev/projector/sideeffects/sideeffectstest"
)

// newSecret returns a random whsec_ secret of a 32-byte key.
func newSecret(t *testing.T) SigningSecret {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	return SigningSecret("whsec_" + base64.StdEncoding.EncodeToString(key))
}

// TestSignMatchesPublishedVectors checks Sign against the signatures the
// Standard Webhooks repository publishes in its libraries' tests
// (libraries/go/webhook_test.go TestWebhookSign, the same vector in the
// JavaScript, Python, PHP, Ruby, Java and C# tests; libraries/rust/src/lib.rs
// test_sign): fixed secret, id, timestamp and body, expected header value.
func TestSignMatchesPublishedVectors(t *testing.T) {
	for _, v := range []struct {
		secret, id string
		ts         int64
		body, want string
	}{
		{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330,
			`{"test": 2432232314}`, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="},
		{"whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD", "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk", 1649367553,
			`{"email":"test@example.com","username":"test_user"}`, "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="},
	} {
		s, err := NewSigner(SigningSecrets{SigningSecret(v.secret)})
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Sign(v.id, v.ts, []byte(v.body)); got != v.want {
			t.Errorf("Sign(%s, %d) = %s, want %s", v.id, v.ts, got, v.want)
		}
	}
	// Two secrets: both signatures, in the configured order, space-separated.
	two, err := NewSigner(SigningSecrets{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"})
	if err != nil {
		t.Fatal(err)
	}
	got := two.Sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, []byte(`{"test": 2432232314}`))
	if parts := strings.Split(got, " "); len(parts) != 2 || parts[0] != "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" {
		t.Errorf("two secrets: %q", got)
	}
}

// signedRequest is what the receiver got: the headers and the raw body.
type signedRequest struct {
	header http.Header
	body   []byte
}

// capture is a receiver that records every request and answers 200.
func capture(t *testing.T) (*httptest.Server, func() []signedRequest) {
	var mu sync.Mutex
	var got []signedRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, signedRequest{r.Header.Clone(), body})
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []signedRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]signedRequest(nil), got...)
	}
}

// TestSignedCallsVerifyWithReferenceLibrary sends signed calls through the
// real Client and verifies what the receiver got with the Standard Webhooks
// reference library for Go (github.com/standard-webhooks/standard-webhooks,
// libraries/go), which we did not write. During a rotation ([new, old]
// configured) a receiver holding only the old secret and one holding only
// the new verify every call; one holding neither fails, as does a body
// changed by one byte.
func TestSignedCallsVerifyWithReferenceLibrary(t *testing.T) {
	newSec, oldSec, other := newSecret(t), newSecret(t), newSecret(t)
	verifier := func(s SigningSecret) *standardwebhooks.Webhook {
		wh, err := standardwebhooks.NewWebhook(string(s))
		if err != nil {
			t.Fatal(err)
		}
		return wh
	}
	for _, tc := range []struct {
		name       string
		configured SigningSecrets
		verifies   []SigningSecret
		fails      []SigningSecret
	}{
		{"one secret", SigningSecrets{oldSec}, []SigningSecret{oldSec}, []SigningSecret{newSec, other}},
		{"rotation: new and old", SigningSecrets{newSec, oldSec}, []SigningSecret{newSec, oldSec}, []SigningSecret{other}},
		{"rotation done: new only", SigningSecrets{newSec}, []SigningSecret{newSec}, []SigningSecret{oldSec, other}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, got := capture(t)
			wh := New(Config{URL: srv.URL, Timeout: longTimeout, SigningSecret: tc.configured})
			// A key with "." and "%" (webhook-id percent-encodes them) and
			// one without (webhook-id is the key itself).
			for _, key := range []string{"email:case:CASE-1:sla-breach:v3", "order.42%:v1"} {
				in := sideeffectstest.Intent(t, key, "fx", "p")
				if res := wh.Call(context.Background(), in, in.Value); res.Outcome != effect.OutcomeSucceeded {
					t.Fatalf("call: %v %v", res.Outcome, res.Err)
				}
			}
			reqs := got()
			if len(reqs) != 2 {
				t.Fatalf("receiver got %d requests", len(reqs))
			}
			for _, r := range reqs {
				key := r.header.Get("Idempotency-Key")
				if id := r.header.Get(HeaderID); id != MessageID(key) || strings.Contains(id, ".") {
					t.Errorf("webhook-id %q for key %q", id, key)
				}
				if n := len(strings.Split(r.header.Get(HeaderSignature), " ")); n != len(tc.configured) {
					t.Errorf("%d signatures for %d secrets: %q", n, len(tc.configured), r.header.Get(HeaderSignature))
				}
				for _, s := range tc.verifies {
					if err := verifier(s).Verify(r.body, r.header); err != nil {
						t.Errorf("key %q: a receiver holding one of the configured secrets cannot verify: %v", key, err)
					}
				}
				for _, s := range tc.fails {
					if err := verifier(s).Verify(r.body, r.header); err == nil {
						t.Errorf("key %q: a receiver holding another secret verified the call", key)
					}
				}
				tampered := bytes.Clone(r.body)
				tampered[len(tampered)-2] ^= 1
				if err := verifier(tc.configured[0]).Verify(tampered, r.header); err == nil {
					t.Errorf("key %q: a changed body verified", key)
				}
			}
		})
	}
}

// TestSignedPerAttempt: each attempt carries its own timestamp, taken when
// it is sent, and a signature over exactly the bytes it sent; Idempotency-Key
// is kept. A Client whose secret does not decode fails every call and sends
// nothing, rather than calling unsigned.
func TestSignedPerAttempt(t *testing.T) {
	sec := newSecret(t)
	srv, got := capture(t)
	base := time.Now().Truncate(time.Second)
	clock := []time.Time{base, base.Add(90 * time.Second)}
	var calls int
	wh := New(Config{URL: srv.URL, Timeout: longTimeout, SigningSecret: SigningSecrets{sec}})
	wh.Now = func() time.Time { calls++; return clock[calls-1] }
	in := sideeffectstest.Intent(t, "k-1", "fx", "p")
	for range clock {
		if res := wh.Call(context.Background(), in, in.Value); res.Outcome != effect.OutcomeSucceeded {
			t.Fatalf("call: %v %v", res.Outcome, res.Err)
		}
	}
	reqs := got()
	if len(reqs) != 2 {
		t.Fatalf("receiver got %d requests", len(reqs))
	}
	ref, err := standardwebhooks.NewWebhook(string(sec))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		if ts := r.header.Get(HeaderTimestamp); ts != strconv.FormatInt(clock[i].Unix(), 10) {
			t.Errorf("attempt %d: webhook-timestamp %s, want %d", i, ts, clock[i].Unix())
		}
		if !bytes.Equal(r.body, in.Value) {
			t.Errorf("attempt %d: body %s, want the intent value", i, r.body)
		}
		if k := r.header.Get("Idempotency-Key"); k != "k-1" {
			t.Errorf("attempt %d: Idempotency-Key %q", i, k)
		}
		if err := ref.Verify(r.body, r.header); err != nil {
			t.Errorf("attempt %d: %v", i, err)
		}
	}
	if reqs[0].header.Get(HeaderSignature) == reqs[1].header.Get(HeaderSignature) {
		t.Error("two attempts at different times carry the same signature")
	}

	bad := New(Config{URL: srv.URL, SigningSecret: SigningSecrets{"whsec_not*base64"}})
	res := bad.Call(context.Background(), in, in.Value)
	if res.Outcome != effect.OutcomeFailed || res.Err == nil || strings.Contains(res.Err.Error(), "not*base64") {
		t.Errorf("undecodable secret: %v %v", res.Outcome, res.Err)
	}
	if n := len(got()); n != 2 {
		t.Errorf("an unsignable call was sent (%d requests)", n)
	}
}

// TestUnsignedWithoutSecret: without a secret no Standard Webhooks header is
// sent (receivers that do not verify see the calls as before).
func TestUnsignedWithoutSecret(t *testing.T) {
	srv, got := capture(t)
	in := sideeffectstest.Intent(t, "k", "fx", "p")
	if res := New(Config{URL: srv.URL, Timeout: longTimeout}).Call(context.Background(), in, in.Value); res.Outcome != effect.OutcomeSucceeded {
		t.Fatalf("call: %v %v", res.Outcome, res.Err)
	}
	for _, h := range []string{HeaderID, HeaderTimestamp, HeaderSignature} {
		if v := got()[0].header.Get(h); v != "" {
			t.Errorf("%s: %q on an unsigned call", h, v)
		}
	}
}

func TestMessageID(t *testing.T) {
	for key, want := range map[string]string{
		"email:case:CASE-1:v3": "email:case:CASE-1:v3",
		"a.b":                  "a%2Eb",
		"a%2Eb":                "a%252Eb", // stays apart from "a.b"
		"v1.0.1%":              "v1%2E0%2E1%25",
	} {
		if got := MessageID(key); got != want {
			t.Errorf("MessageID(%q) = %q, want %q", key, got, want)
		}
	}
}
