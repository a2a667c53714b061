package ingress

// The bodies the ingress answers with: RFC 9457 problems, and the receipts
// of a request, which are the same bytes on every instance and every replay.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/projector-dev/projector/internal/receipt"
)

// problem is an RFC 9457 problem body; Field names what is wrong.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Field  string `json:"field,omitempty"`
}

// writeProblem answers with a problem body; a 503 carries Retry-After.
func writeProblem(w http.ResponseWriter, status int, field, format string, args ...any) {
	p := problem{Type: "about:blank", Title: http.StatusText(status), Status: status, Detail: fmt.Sprintf(format, args...), Field: field}
	b, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", retryAfter)
	}
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// writeJSON answers with a JSON body that must not be cached.
func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// receiptPath is where the receipts of a request are read (GET).
func receiptPath(key, tenant string) string {
	p := "/v1/receipts/" + url.PathEscape(key)
	if tenant != "" {
		p += "?tenant=" + url.QueryEscape(tenant)
	}
	return p
}

// eventBody is one event's committed outcome in a response.
type eventBody struct {
	EventID     string            `json:"eventId"`
	Outcome     string            `json:"outcome"`
	Projections map[string]string `json:"projections,omitempty"`
	Reason      string            `json:"reason,omitempty"`
	Topic       string            `json:"topic"`
	Partition   int32             `json:"partition"`
	Offset      int64             `json:"offset"`
	Fingerprint string            `json:"fingerprint"`
}

// responseBody is a 200/201 body: one event's fields inline, or events.
type responseBody struct {
	IdempotencyKey string `json:"idempotencyKey"`
	TenantID       string `json:"tenantId,omitempty"`
	*eventBody
	Events []eventBody `json:"events,omitempty"`
}

// bodyOf is a receipt as a response shows it.
func bodyOf(rc *receipt.Receipt) eventBody {
	return eventBody{EventID: rc.EventID, Outcome: rc.Outcome, Projections: rc.Projections, Reason: rc.Reason,
		Topic: rc.Topic, Partition: rc.Partition, Offset: rc.Offset, Fingerprint: rc.Fingerprint}
}

// responseFor is the body of the receipts rs of one request: a function of
// the committed receipts alone, so that every instance, every time, gives
// the same bytes.
func responseFor(key, tenant string, batch bool, rs []*receipt.Receipt) []byte {
	b := responseBody{IdempotencyKey: key, TenantID: tenant}
	if batch {
		for _, rc := range rs {
			b.Events = append(b.Events, bodyOf(rc))
		}
	} else {
		eb := bodyOf(rs[0])
		b.eventBody = &eb
	}
	out, _ := json.Marshal(b) // strings, ints and string maps: cannot fail
	return append(out, '\n')
}

// body is the 200/201 body of the request's receipts rs.
func (req *request) body(rs []*receipt.Receipt) []byte {
	return responseFor(req.key, req.tenant, req.batch, rs)
}

// pending is the 202 body: where to read the receipts once committed.
func (req *request) pending() []byte {
	out, _ := json.Marshal(map[string]string{"idempotencyKey": req.key, "tenantId": req.tenant, "status": "pending",
		"location": receiptPath(req.key, req.tenant)})
	return append(out, '\n')
}
