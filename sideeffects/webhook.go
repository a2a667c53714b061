package sideeffects

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"

	"github.com/projector-dev/projector/internal/runtime/config"
)

// Outcome is an executor's classification of one call.
type Outcome uint8

// The outcomes. The zero Outcome means "not finished".
const (
	// OutcomeSucceeded: the receiver confirmed the effect (2xx).
	OutcomeSucceeded Outcome = iota + 1
	// OutcomeRetryable: the effect did not happen and may succeed later
	// (408, 425, 429, 5xx, or a connection error before the request was
	// fully written).
	OutcomeRetryable
	// OutcomeFailed: the receiver refused the effect for good (other 4xx,
	// 3xx, an unusable URL).
	OutcomeFailed
	// OutcomeUnknown: the request was written, then no answer came (timeout,
	// connection lost). The effect may or may not have happened.
	OutcomeUnknown
)

var outcomeNames = [...]string{OutcomeSucceeded: "succeeded", OutcomeRetryable: "retryable", OutcomeFailed: "failed", OutcomeUnknown: "unknown"}

func (o Outcome) String() string {
	if o != 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// MarshalText makes outcomes readable in the ledger's JSON.
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText is the inverse of MarshalText.
func (o *Outcome) UnmarshalText(b []byte) error {
	for i, n := range outcomeNames {
		if n != "" && n == string(b) {
			*o = Outcome(i)
			return nil
		}
	}
	return fmt.Errorf("sideeffects: unknown outcome %q", b)
}

// Result is what one Execute call found out.
type Result struct {
	Outcome    Outcome
	StatusCode int    // 0 when no response was received
	Ref        string // external reference of a success, if the receiver gave one
	Err        error  // the transport error or a description of a refusal
	Duration   time.Duration
}

// Executor performs one side effect. It must be safe for concurrent use and
// must send key as the idempotency key, so that a retry after an unknown
// outcome is recognised by the receiver.
type Executor interface {
	Execute(ctx context.Context, in Intent, body []byte) Result
}

// Backoff limits. The delay before retry n (n ≥ 1) is uniform in
// [0, min(BackoffCap, BackoffBase·2^(n-1))]: "full jitter", so that keys
// failing together against one receiver do not retry together.
const (
	BackoffBase = 200 * time.Millisecond
	BackoffCap  = 30 * time.Second
)

// Backoff returns the delay before retry number attempt (1 = the first
// retry). rng nil uses the global source; a *rand.Rand is not safe for
// concurrent use, so callers sharing one must serialise.
func Backoff(attempt int, rng *rand.Rand) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	ceil := BackoffCap
	if attempt <= 32 { // beyond, the shift would overflow; the cap applies anyway
		if d := BackoffBase << (attempt - 1); d > 0 && d < BackoffCap {
			ceil = d
		}
	}
	if rng == nil {
		return time.Duration(rand.Int64N(int64(ceil) + 1))
	}
	return time.Duration(rng.Int64N(int64(ceil) + 1))
}

// maxResponseBody bounds what is read of a response to find its id.
const maxResponseBody = 1 << 20

// Webhook POSTs the intent value to a URL.
type Webhook struct {
	URL     string
	Timeout time.Duration // per request, including reading the response; 0: DefaultWebhookTimeout
	// Client is the HTTP client; nil uses a shared one that does not follow
	// redirects (a redirect is reported as failed: the effect's URL is wrong).
	Client *http.Client
}

var defaultClient = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// NewWebhook returns the executor for an effect's webhook configuration.
func NewWebhook(w WebhookConfig) *Webhook {
	return &Webhook{URL: w.URL, Timeout: time.Duration(w.Timeout)}
}

// Execute implements Executor.
func (w *Webhook) Execute(ctx context.Context, in Intent, body []byte) Result {
	start := time.Now()
	res := w.execute(ctx, in, body)
	res.Duration = time.Since(start)
	return res
}

func (w *Webhook) execute(ctx context.Context, in Intent, body []byte) Result {
	timeout := w.Timeout
	if timeout <= 0 {
		timeout = config.DefaultWebhookTimeout
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
		return Result{Outcome: OutcomeFailed, Err: fmt.Errorf("sideeffects: webhook request: %w", err)}
	}
	// net/http silently re-sends a request carrying Idempotency-Key when a
	// reused connection breaks before the response. Without GetBody it
	// cannot, so every send is one ledger attempt and a lost connection after
	// the request was written is reported (as unknown), not hidden.
	req.GetBody = nil
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", in.Key)

	client := w.Client
	if client == nil {
		client = defaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		if wrote.Load() {
			return Result{Outcome: OutcomeUnknown, Err: err}
		}
		return Result{Outcome: OutcomeRetryable, Err: err}
	}
	defer resp.Body.Close()

	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		// The status line is the receiver's confirmation; failing to read the
		// rest only costs the reference.
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
		return Result{Outcome: OutcomeSucceeded, StatusCode: code, Ref: responseRef(data, resp.Header)}
	case code == http.StatusRequestTimeout, code == http.StatusTooEarly, code == http.StatusTooManyRequests, code >= 500:
		drain(resp.Body)
		return Result{Outcome: OutcomeRetryable, StatusCode: code, Err: fmt.Errorf("sideeffects: webhook: %s", resp.Status)}
	default:
		drain(resp.Body)
		return Result{Outcome: OutcomeFailed, StatusCode: code, Err: fmt.Errorf("sideeffects: webhook: %s", resp.Status)}
	}
}

// drain reads a little of an unwanted body so the connection can be reused.
func drain(r io.Reader) { _, _ = io.Copy(io.Discard, io.LimitReader(r, 64<<10)) }

// responseRef is the response JSON's "id" (a string, or a number's literal),
// else the X-Request-Id header, else "".
func responseRef(body []byte, h http.Header) string {
	var v struct {
		ID json.RawMessage `json:"id"`
	}
	if json.Unmarshal(body, &v) == nil && len(v.ID) > 0 {
		var s string
		if err := json.Unmarshal(v.ID, &s); err == nil {
			if s != "" {
				return s
			}
		} else if c := v.ID[0]; c == '-' || (c >= '0' && c <= '9') {
			return string(v.ID)
		}
	}
	return strings.TrimSpace(h.Get("X-Request-Id"))
}
