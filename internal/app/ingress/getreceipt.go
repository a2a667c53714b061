package ingress

// GET /v1/receipts/{key}: polling for the outcome of a POST.

import (
	"net/http"

	"github.com/projector-dev/projector/internal/core/receipt"
)

// getReceipt answers GET /v1/receipts/{key}: the body a replay gets (200),
// 202 while the key is decided but some of its events have no receipt yet,
// 404 when it is not decided.
func (s *Server) getReceipt(w http.ResponseWriter, r *http.Request) {
	if ok, why := s.Ready(); !ok {
		writeProblem(w, http.StatusServiceUnavailable, "", "not ready: %s", why)
		return
	}
	key := r.PathValue("key")
	if !printable(key) {
		writeProblem(w, 400, "key", "the key must be 1 to %d printable ASCII characters", MaxKeyLen)
		return
	}
	tenant, _, f := s.tenantOf(r)
	if f != nil {
		writeProblem(w, f.status, f.field, "%s", f.detail)
		return
	}
	// The key's decision gives the request's shape; a key ingested before
	// claims existed has its first receipt for it.
	var count int
	var batch bool
	if won := s.view.claim(tenant, key); won != nil {
		count, batch = won.Count, won.Batch
	} else if first := s.view.get(receipt.Key(tenant, key, 0)); first != nil {
		count, batch = first.Count, first.Batch
	} else {
		writeProblem(w, http.StatusNotFound, "key", "no committed receipt for this key (yet): a request answered 202 is committed shortly, poll again")
		return
	}
	rs := make([]*receipt.Receipt, 0, count)
	for i := range count {
		rc := s.view.get(receipt.Key(tenant, key, i))
		if rc == nil {
			req := &request{key: key, tenant: tenant}
			w.Header().Set("Location", receiptPath(key, tenant))
			writeJSON(w, http.StatusAccepted, req.pending())
			return
		}
		rs = append(rs, rc)
	}
	writeJSON(w, http.StatusOK, responseFor(key, tenant, batch, rs))
}
