// Package webhook is how the side-effect executor performs an effect: an
// HTTP POST of the intent to the effect's URL, with the idempotency key in
// the Idempotency-Key header (docs/contract.md#side-effect-webhook), signed
// as the Standard Webhooks specification defines when the effect has a
// signing secret (sign.go), and the answer classified as an effect.Outcome.
// Client is the one implementation of sideeffects.Caller that the
// application configures, each effect's from its Config (config.go).
//
// Invariants (named in docs/design.md#invariants):
//
//   - unknown-never-guessed: a call is unknown exactly when the whole request
//     may have reached the receiver and no answer came. A request that failed
//     before it was fully written is retryable, and net/http never re-sends
//     one on its own (GetBody is cleared), so every send is one ledger
//     attempt and a lost answer is reported, not hidden. A call whose
//     context is done before it begins sends nothing and says so
//     (effect.Result.NotSent): it is no attempt.
//   - one-call-in-flight-per-key: a call ends at the deadline of the context
//     the Runner gives it (never later than the deadline the ledger recorded
//     for the attempt), or at Timeout if that comes first, so a retry after
//     the deadline never overlaps it.
package webhook

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"

	"github.com/projector-dev/projector/sideeffects/effect"
)

// Client calls an effect's webhook: it POSTs the intent value to a URL,
// with the idempotency key in the Idempotency-Key header, and classifies
// the answer as an effect.Outcome. It is the executor's sideeffects.Caller
// for every configured effect, and safe for concurrent use.
type Client struct {
	URL     string
	Timeout time.Duration // per request, including reading the response; 0: DefaultTimeout
	// HTTP is the HTTP client; nil uses a shared one that does not follow
	// redirects (a redirect is reported as failed: the effect's URL is wrong).
	HTTP *http.Client
	// Signer, when set, signs every call with the Standard Webhooks headers
	// (sign.go); nil sends unsigned calls.
	Signer *Signer
	// Now stamps each signed attempt's webhook-timestamp; nil: time.Now.
	Now func() time.Time

	// err is why New could not build the Signer: every call then fails
	// with it rather than going out unsigned.
	err error
}

var defaultClient = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// New returns the client of an effect's webhook configuration. A signing
// secret that does not decode (SigningSecret.Key fails) makes every call
// fail with the reason; a call is never sent unsigned when secrets are
// configured.
func New(c Config) *Client {
	cl := &Client{URL: c.URL, Timeout: c.Timeout}
	if c.SigningSecret != nil {
		cl.Signer, cl.err = NewSigner(c.SigningSecret)
	}
	return cl
}

// Call implements sideeffects.Caller: one POST, never re-sent.
func (w *Client) Call(ctx context.Context, in effect.Intent, body []byte) effect.Result {
	start := time.Now()
	res := w.call(ctx, in, body)
	res.Duration = time.Since(start)
	return res
}

func (w *Client) call(ctx context.Context, in effect.Intent, body []byte) effect.Result {
	if err := ctx.Err(); err != nil {
		// Given no time at all: nothing goes to the network, so this is no
		// attempt (the Runner withdraws it), whatever the receiver's state.
		return effect.Result{Outcome: effect.OutcomeRetryable, NotSent: true,
			Err: fmt.Errorf("sideeffects: webhook not called: %w", context.Cause(ctx))}
	}
	if w.err != nil {
		return effect.Result{Outcome: effect.OutcomeFailed, Err: w.err}
	}
	timeout := w.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	// wrote tells "failed before the receiver could act" (retryable) from
	// "failed after the whole request reached the wire" (unknown). A request
	// that failed while being written is incomplete, so the receiver cannot
	// have acted on it.
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{WroteRequest: func(i httptrace.WroteRequestInfo) {
		if i.Err == nil {
			wrote.Store(true)
		}
	}}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return effect.Result{Outcome: effect.OutcomeFailed, Err: fmt.Errorf("sideeffects: webhook request: %w", err)}
	}
	// net/http silently re-sends a request carrying Idempotency-Key when a
	// reused connection breaks before the response. Without GetBody it
	// cannot, so every send is one ledger attempt and a lost connection after
	// the request was written is reported (as unknown), not hidden.
	req.GetBody = nil
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", in.Key)
	if in.TraceParent != "" {
		// The event's W3C trace context (docs/contract.md#trace-context).
		req.Header.Set("traceparent", in.TraceParent)
		if in.TraceState != "" {
			req.Header.Set("tracestate", in.TraceState)
		}
	}
	if w.Signer != nil {
		// Signed over the very bytes the request carries, stamped now:
		// each attempt has its own timestamp (receivers reject old ones).
		now := time.Now
		if w.Now != nil {
			now = w.Now
		}
		w.Signer.sign(req.Header, in.Key, now(), body)
	}

	client := w.HTTP
	if client == nil {
		client = defaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		if wrote.Load() {
			return effect.Result{Outcome: effect.OutcomeUnknown, Err: err}
		}
		return effect.Result{Outcome: effect.OutcomeRetryable, Err: err}
	}
	defer resp.Body.Close()
	return classify(resp)
}
