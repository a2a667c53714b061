package ingress

// Where the ingress meets its door lock (internal/app/ingressauth,
// docs/ingress.md#authentication): whose tenant a request is, what it is
// charged, and the listener's limits.

import (
	"net/http"
	"time"

	"github.com/projector-dev/projector/internal/app/httpserver"
	"github.com/projector-dev/projector/internal/app/ingressauth"
)

// Listener limits (docs/ingress.md#timeouts-and-limits).
const (
	// ReadHeaderTimeout bounds the request line and headers: a client that
	// trickles them (slowloris) is cut off.
	ReadHeaderTimeout = 10 * time.Second
	// ReadTimeout bounds the whole request, body included: a body of the
	// default 1 MiB limit must arrive at 35 KB/s or faster.
	ReadTimeout = 30 * time.Second
	// IdleTimeout keeps a keep-alive connection longer than clients
	// usually do (Go's transport: 90s), so the client, not the server,
	// closes an idle one and never sends on a connection being closed.
	IdleTimeout = 120 * time.Second
	// MaxHeaderBytes leaves room for large JWTs (a few KiB) and little
	// else; Go's default is 1 MB.
	MaxHeaderBytes = 64 << 10
	// writeMargin is WriteTimeout's room beyond the request's own waits.
	writeMargin = 10 * time.Second
)

// WriteTimeout is the time from the end of a request's headers to the end
// of its answer: the body's read, the write of its events (up to
// ingress.timeout), the wait for their receipts (up to ingress.timeout
// again) and the answer's write. It is never shorter, or a request still
// waiting for its receipt would be cut off instead of answered 202.
func WriteTimeout(timeout time.Duration) time.Duration {
	return ReadTimeout + 2*timeout + writeMargin
}

func (s *Server) listenerOptions() httpserver.Options {
	return httpserver.Options{TLS: s.cfg.Gate.TLSConfig(), ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout,
		WriteTimeout: WriteTimeout(s.cfg.Timeout), IdleTimeout: IdleTimeout, MaxHeaderBytes: MaxHeaderBytes}
}

// requestTenant is whose request this is: the credential's tenant when the
// ingress authenticates (the Gate has refused an X-Tenant-ID naming
// another), else what X-Tenant-ID says. ok is false when the header is
// given more than once.
func requestTenant(r *http.Request) (tenant string, present, ok bool) {
	if t, authed := ingressauth.Tenant(r.Context()); authed {
		return t, true, true
	}
	return headerValue(r, HeaderTenant)
}

// overLimit charges a request that is about to write events to its
// tenant's rate limit (ingress.rateLimit) and answers 429 with Retry-After
// when the tenant is over it. Replays and refusals are never charged: they
// write nothing.
func (s *Server) overLimit(w http.ResponseWriter, req *request) bool {
	ok, wait := s.cfg.Gate.Charge(req.tenant)
	if ok {
		return false
	}
	w.Header().Set("Retry-After", ingressauth.RetryAfter(wait))
	writeProblem(w, http.StatusTooManyRequests, "", "tenant %q is over its rate limit (ingress.rateLimit); retry after Retry-After seconds with the same key and body", req.tenant)
	return true
}

// problemOf is writeProblem for the Gate's answers.
func problemOf(w http.ResponseWriter, status int, field, detail string) {
	writeProblem(w, status, field, "%s", detail)
}
