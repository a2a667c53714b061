package ingress

// Writing an answer: RFC 9457 problem bodies, and JSON bodies that must
// not be cached.

import (
	"encoding/json"
	"fmt"
	"net/http"
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
