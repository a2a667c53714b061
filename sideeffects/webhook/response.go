package webhook

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/projector-dev/projector/sideeffects/effect"
)

// maxResponseBody bounds what is read of a response to find its id.
const maxResponseBody = 1 << 20

// classify reads the receiver's answer: a 2xx is the effect's confirmation
// (with its reference), 408, 425, 429 and 5xx say it did not happen and may
// later, and any other status refuses it for good.
func classify(resp *http.Response) effect.Result {
	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		// The status line is the receiver's confirmation; failing to read the
		// rest only costs the reference.
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
		return effect.Result{Outcome: effect.OutcomeSucceeded, StatusCode: code, Ref: responseRef(data, resp.Header)}
	case code == http.StatusRequestTimeout, code == http.StatusTooEarly, code == http.StatusTooManyRequests, code >= 500:
		drain(resp.Body)
		return effect.Result{Outcome: effect.OutcomeRetryable, StatusCode: code, Err: fmt.Errorf("sideeffects: webhook: %s", resp.Status)}
	default:
		drain(resp.Body)
		return effect.Result{Outcome: effect.OutcomeFailed, StatusCode: code, Err: fmt.Errorf("sideeffects: webhook: %s", resp.Status)}
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
