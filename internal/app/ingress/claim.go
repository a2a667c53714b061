package ingress

// Claims: a request is written as one claim record, keyed by (tenant, key);
// the processors decide it (docs/decisions/012-ingress-claims.md).

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/projector-dev/projector/internal/core/inputformat"
	"github.com/projector-dev/projector/internal/core/receipt"
)

// claimSlack is how much a claim record may exceed kafka.maxRecordBytes:
// the request's framing (tenant, key, request id, member names) around
// its events, and the ids the ingress adds to a batch's events. The
// producer's batch limit and the claims topic's max.message.bytes
// (eos.MaxBatchBytes) leave room for it and the record's own overhead.
const claimSlack = 8 << 10

// claimOf gives req its id and its claim record's value, and refuses a
// request that does not fit one record (413).
func (s *Server) claimOf(req *request) *failure {
	req.id = rand.Text()
	evs := make([]json.RawMessage, len(req.items))
	for i, it := range req.items {
		evs[i] = it.value
	}
	req.claim = receipt.AppendClaim(nil, &receipt.Claim{TenantID: req.tenant, Key: req.key, Request: req.id, Batch: req.batch, Events: evs})
	if limit := s.cfg.MaxRecordBytes + claimSlack; len(req.claim) > limit {
		return fail(413, "body", "the request is written as one record of at most kafka.maxRecordBytes + 8KiB (%d bytes); with its derived ids it is %d bytes: send fewer or smaller events", limit, len(req.claim))
	}
	return nil
}

// writeClaim writes req's claim and waits for the acknowledgement.
//
// The wait is bounded by the request timeout: with the brokers away the
// client retries a batch it has sent for as long as it takes (an
// idempotent producer cannot drop it), so the answer does not wait for it.
// A claim not acknowledged in time may still land; the retry the 503 asks
// for is decided with it (the first of the two wins, and both name the same
// payload).
func (s *Server) writeClaim(ctx context.Context, req *request) error {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	acked := make(chan error, 1) // buffered: a late promise never blocks
	s.producer.Produce(pctx, &kgo.Record{Topic: s.cfg.ClaimsTopic, Key: []byte(receipt.ClaimKey(req.tenant, req.key)), Value: req.claim, Headers: req.trace},
		func(_ *kgo.Record, err error) { acked <- err })
	select {
	case err := <-acked:
		return err
	case <-pctx.Done():
		return fmt.Errorf("not acknowledged within %s: %w", s.cfg.Timeout, pctx.Err())
	}
}

// traceOf is the request's W3C trace context (the traceparent and
// tracestate headers, https://www.w3.org/TR/trace-context/) as the headers
// of its claim record, which the processor deciding the claim carries on to
// the events it forwards (docs/contract.md#trace-context). With tracing on
// it is the context of the request's span (tracing.go), a child of the
// request's: the events' outputs then chain to the ingress's span.
func (s *Server) traceOf(r *http.Request) []kgo.RecordHeader {
	if s.tracer != nil {
		if sc := trace.SpanContextFromContext(r.Context()); sc.IsValid() {
			return inputformat.TraceOf(sc).Headers(nil)
		}
	}
	return requestTrace(r).Headers(nil)
}

// requestTrace is the request's own W3C trace context. A traceparent that
// is invalid, or given more than once, is ignored as W3C says: the request
// is not refused for it. Several tracestate headers are one list.
func requestTrace(r *http.Request) inputformat.TraceContext {
	tp, present, ok := headerValue(r, inputformat.HeaderTraceParent)
	if !present || !ok {
		return inputformat.TraceContext{}
	}
	ts := strings.Join(r.Header.Values(inputformat.HeaderTraceState), ",")
	var state []byte
	if ts != "" {
		state = []byte(ts)
	}
	return inputformat.ParseTrace([]byte(tp), state)
}

// pollable reports whether key's receipt path, /v1/receipts/{key} with the
// key path-escaped (receiptPath), reaches the receipt handler with the key
// itself. "." and ".." are dot segments, which URL normalisation (RFC 3986
// §5.2.4) removes, and the router redirects away; a segment that is only
// an escaped "/" is routed as a trailing slash. Every other key is one
// segment, slashes escaped (TestKeysEveryAcceptedKeyPolls checks this
// against the router).
func pollable(key string) bool { return key != "." && key != ".." && key != "/" }
