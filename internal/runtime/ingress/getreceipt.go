package ingress

// GET /v1/receipts/{key}: polling for the outcome of a POST.

import (
	"net/http"

	"github.com/projector-dev/projector/internal/runtime/receipt"
)

// getReceipt answers GET /v1/receipts/{key}: the body a replay gets (200),
// 202 while some events of the request have no receipt yet, 404 when none
// has.
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
	tenant, has, ok := requestTenant(r)
	if !has {
		tenant = r.URL.Query().Get("tenant")
	}
	if !ok || (tenant != "" && !printable(tenant)) {
		writeProblem(w, 400, HeaderTenant, "%s must be given once, 1 to %d printable ASCII characters", HeaderTenant, MaxKeyLen)
		return
	}
	if tenant == "" && s.cfg.RequireTenant {
		writeProblem(w, 400, HeaderTenant, "the %s header is required", HeaderTenant)
		return
	}
	first := s.view.get(receipt.Key(tenant, key, 0))
	if first == nil {
		writeProblem(w, http.StatusNotFound, "key", "no committed receipt for this key (yet): a request answered 202 is committed shortly, poll again")
		return
	}
	rs := []*receipt.Receipt{first}
	for i := 1; i < first.Count; i++ {
		rc := s.view.get(receipt.Key(tenant, key, i))
		if rc == nil {
			req := &request{key: key, tenant: tenant}
			w.Header().Set("Location", receiptPath(key, tenant))
			writeJSON(w, http.StatusAccepted, req.pending())
			return
		}
		rs = append(rs, rc)
	}
	writeJSON(w, http.StatusOK, responseFor(key, tenant, first.Batch, rs))
}
