package ingress

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/internal/core/jsonenc"
	"github.com/projector-dev/projector/internal/core/receipt"
)

// Header names.
const (
	HeaderKey      = "Idempotency-Key"
	HeaderTenant   = "X-Tenant-ID"
	HeaderReplayed = "Idempotent-Replayed"
)

// MaxKeyLen bounds Idempotency-Key and X-Tenant-ID (characters): the
// receipt's bound, which the processor checks again (receipt.ParseOrigin).
const MaxKeyLen = receipt.MaxKeyLen

// retryAfter is the Retry-After of 409 in flight and 503 (seconds).
const retryAfter = "1"

// printable reports whether s is 1..MaxKeyLen printable ASCII characters
// (receipt.Printable).
func printable(s string) bool { return receipt.Printable(s) }

// headerValue returns the header's single value; ok is false when it is
// given more than once.
func headerValue(r *http.Request, name string) (v string, present, ok bool) {
	vs := r.Header.Values(name)
	switch len(vs) {
	case 0:
		return "", false, true
	case 1:
		return vs[0], true, true
	default:
		return "", true, false
	}
}

// tenantOf determines the tenant a request names: the X-Tenant-ID header,
// or for a GET also ?tenant= (a 202's Location carries it). given is false
// when it names none; then a POST's envelopes name it (parseEvent). This
// is the one place that says where the tenant comes from: the credential's
// (requestTenant, set by the Gate, which refused a header or ?tenant=
// naming another tenant with 403), else the header.
func (s *Server) tenantOf(r *http.Request) (tenant string, given bool, f *failure) {
	tenant, given, ok := requestTenant(r)
	if !given && r.Method == http.MethodGet {
		tenant = r.URL.Query().Get("tenant")
		given = tenant != ""
	}
	switch {
	case !given && s.cfg.RequireTenant:
		return "", false, fail(400, HeaderTenant, "the %s header is required", HeaderTenant)
	case given && (!ok || !printable(tenant)):
		return "", false, fail(400, HeaderTenant, "%s must be given once, 1 to %d printable ASCII characters", HeaderTenant, MaxKeyLen)
	}
	return tenant, given, nil
}

// item is one event of a request, validated.
type item struct {
	value []byte // the record value: the client's bytes with eventId (and tenantId) added
	ev    *envelope.Event
	fp    string // hex fingerprint
}

// request is a parsed POST.
type request struct {
	key, tenant string
	batch       bool
	items       []item
	// id names this HTTP request in its claim (random); claim is the claim
	// record's value: the request as the processors decide it.
	id    string
	claim []byte
	// trace is the request's W3C trace context as claim record headers
	// (traceOf); nil when it carries none.
	trace []kgo.RecordHeader
}

// failure is a 4xx found while parsing.
type failure struct {
	status int
	field  string
	detail string
}

func fail(status int, field, format string, args ...any) *failure {
	return &failure{status, field, fmt.Sprintf(format, args...)}
}

func (s *Server) post(w http.ResponseWriter, r *http.Request) {
	if ok, why := s.Ready(); !ok {
		writeProblem(w, http.StatusServiceUnavailable, "", "not ready: %s", why)
		return
	}
	req, f := s.parse(w, r)
	if f != nil {
		writeProblem(w, f.status, f.field, "%s", f.detail)
		return
	}
	// One request per key at a time on this instance. Another instance may
	// take the same key at the same moment; the derived event id and the
	// processor's dedup settle that case (decision 008).
	lk := req.tenant + "\n" + req.key
	s.mu.Lock()
	_, busy := s.inflight[lk]
	if !busy {
		s.inflight[lk] = struct{}{}
	}
	s.mu.Unlock()
	if busy {
		w.Header().Set("Retry-After", retryAfter)
		writeProblem(w, http.StatusConflict, HeaderKey, "a request with this key is in flight; retry after it is answered")
		return
	}
	defer func() {
		s.mu.Lock()
		delete(s.inflight, lk)
		s.mu.Unlock()
	}()
	s.handle(w, r, req)
}

// parse checks the headers and the body of a POST.
func (s *Server) parse(w http.ResponseWriter, r *http.Request) (*request, *failure) {
	key, present, ok := headerValue(r, HeaderKey)
	switch {
	case !present:
		return nil, fail(400, HeaderKey, "the %s header is required", HeaderKey)
	case !ok || !printable(key):
		return nil, fail(400, HeaderKey, "%s must be given once, 1 to %d printable ASCII characters", HeaderKey, MaxKeyLen)
	case !pollable(key):
		return nil, fail(400, HeaderKey, "%s must not be %q: its receipt's path, /v1/receipts/{key}, would be rewritten (keys \".\", \"..\" and \"/\" are refused)", HeaderKey, key)
	}
	tenant, hasTenant, f := s.tenantOf(r)
	if f != nil {
		return nil, f
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return nil, fail(413, "body", "the body is over the limit of %d bytes (ingress.maxBodyBytes)", s.cfg.MaxBodyBytes)
		}
		return nil, fail(400, "body", "reading the body: %v", err)
	}
	data = bytes.TrimSpace(data)
	// One parse of the body: it checks the syntax too (a syntax error is
	// "not JSON"; a type error, or null, is JSON that is not an object).
	var top map[string]json.RawMessage
	err = json.Unmarshal(data, &top)
	var syntax *json.SyntaxError
	switch {
	case errors.As(err, &syntax):
		return nil, fail(400, "body", "the body is not JSON")
	case err != nil || top == nil:
		return nil, fail(422, "body", `the body must be a JSON object: an event envelope or {"events":[…]}`)
	}
	req := &request{key: key, tenant: tenant, trace: s.traceOf(r)}
	elems := []json.RawMessage{data}
	if evs, ok := top["events"]; ok && top["eventType"] == nil {
		req.batch = true
		if err := json.Unmarshal(evs, &elems); err != nil {
			return nil, fail(422, "events", "events must be an array of event envelopes")
		}
		if len(elems) == 0 || len(elems) > s.cfg.MaxBatch {
			return nil, fail(422, "events", "events must hold 1 to %d envelopes (ingress.maxBatch), got %d", s.cfg.MaxBatch, len(elems))
		}
	}
	for i, el := range elems {
		prefix, members := "", top // a single event's members are the body's
		if req.batch {
			prefix, members = "events["+strconv.Itoa(i)+"].", nil
		}
		it, f := s.parseEvent(req, hasTenant, i, prefix, bytes.TrimSpace(el), members)
		if f != nil {
			return nil, f
		}
		req.items = append(req.items, it)
	}
	return req, s.claimOf(req)
}

// parseEvent validates one envelope and gives it its derived event id (and
// the header's tenant). m is el's members when they are parsed already.
func (s *Server) parseEvent(req *request, hasTenant bool, i int, prefix string, el []byte, m map[string]json.RawMessage) (item, *failure) {
	if m == nil && (len(el) == 0 || el[0] != '{' || json.Unmarshal(el, &m) != nil) {
		return item{}, fail(422, prefix+"value", "an event envelope must be a JSON object")
	}
	var bodyTenant string
	rawTenant, tenantGiven := m["tenantId"]
	if tenantGiven {
		if err := json.Unmarshal(rawTenant, &bodyTenant); err != nil && string(rawTenant) != "null" {
			return item{}, fail(422, prefix+"tenantId", "tenantId must be a string")
		}
	}
	switch {
	case hasTenant && tenantGiven && bodyTenant != req.tenant:
		return item{}, fail(422, prefix+"tenantId", "tenantId %q differs from the request's tenant %q (%s, or the credential's); omit it or make them equal", bodyTenant, req.tenant, HeaderTenant)
	case !hasTenant && i == 0:
		if bodyTenant != "" && !printable(bodyTenant) {
			return item{}, fail(422, prefix+"tenantId", "a tenantId that scopes an Idempotency-Key must be 1 to %d printable ASCII characters", MaxKeyLen)
		}
		req.tenant = bodyTenant
	case !hasTenant && bodyTenant != req.tenant:
		return item{}, fail(422, prefix+"tenantId", "every event of a request must have the same tenantId (%q), got %q", req.tenant, bodyTenant)
	}
	id := receipt.EventID(req.tenant, req.key, i)
	var add []byte
	if raw, ok := m["eventId"]; ok {
		var given string
		if json.Unmarshal(raw, &given) != nil || given != id {
			return item{}, fail(422, prefix+"eventId", "eventId is derived from the tenant and the Idempotency-Key: omit it, or send %q", id)
		}
	} else {
		add = append(add, `"eventId":`...)
		add = strconv.AppendQuote(add, id) // id is hex: quoting is JSON
	}
	if hasTenant && !tenantGiven {
		b, _ := jsonenc.Marshal(req.tenant) // part of the record: no HTML escaping
		if len(add) > 0 {
			add = append(add, ',')
		}
		add = append(append(add, `"tenantId":`...), b...)
	}
	value := el
	if len(add) > 0 {
		rest := bytes.TrimSpace(el[1:])
		value = make([]byte, 0, len(el)+len(add)+2)
		value = append(append(value, '{'), add...)
		if len(rest) > 0 && rest[0] != '}' {
			value = append(value, ',')
		}
		value = append(value, rest...)
	}
	if len(value) > s.cfg.MaxRecordBytes {
		return item{}, fail(413, prefix+"value", "the event is over kafka.maxRecordBytes (%d bytes)", s.cfg.MaxRecordBytes)
	}
	ev := new(envelope.Event)
	fp, err := envelope.DecodeFingerprint(value, s.cfg.MaxRecordBytes, ev) // one walk for both
	if err != nil {
		var ee *envelope.Error
		if errors.As(err, &ee) {
			return item{}, fail(422, prefix+ee.Field, "%s", ee.Msg)
		}
		return item{}, fail(422, prefix+"value", "%v", err)
	}
	return item{value: value, ev: ev, fp: hex.EncodeToString(fp[:])}, nil
}

// handle answers a parsed request. A key this instance sees decided is
// answered from the committed receipts and nothing is written; otherwise
// the request is written as a claim, and answered once the key's decision
// and its events' receipts are committed and read. Only the request the
// decision names, the one that created the events, is answered 201
// (docs/decisions/012-ingress-claims.md).
func (s *Server) handle(w http.ResponseWriter, r *http.Request, req *request) {
	have := make([]*receipt.Receipt, len(req.items))
	won := s.view.claim(req.tenant, req.key)
	if won == nil {
		// Receipts without a decision: a key ingested before claims
		// existed (or a claim receipt not read yet). They are the first
		// payload's: another one is refused here, and a complete set
		// answered; an incomplete one is completed by a claim.
		if missing := s.lookup(req, have, indices(len(req.items))); len(missing) < len(req.items) {
			if f := req.compare(have); f != nil {
				writeProblem(w, f.status, f.field, "%s", f.detail)
				return
			}
			if len(missing) == 0 {
				w.Header().Set(HeaderReplayed, "true")
				writeJSON(w, http.StatusOK, req.body(have))
				return
			}
		}
		if s.overLimit(w, req) {
			return // a request that would write is charged; replays and refusals are not
		}
		if err := s.writeClaim(r.Context(), req); err != nil {
			s.cfg.Logger.Warn("ingress: writing the claim failed", "topic", s.cfg.ClaimsTopic, "err", err)
			writeProblem(w, http.StatusServiceUnavailable, "", "the request could not be written (%v); retry with the same key", err)
			return
		}
	}
	won, ok := s.await(r.Context(), req, won, have)
	if !ok {
		// Not decided and committed (or not read) yet: the claim is
		// written, so it will be; the client polls or retries.
		w.Header().Set("Location", receiptPath(req.key, req.tenant))
		writeJSON(w, http.StatusAccepted, req.pending())
		return
	}
	if f := req.compareClaim(won); f != nil {
		writeProblem(w, f.status, f.field, "%s", f.detail)
		return
	}
	status := http.StatusOK
	if won.Request == req.id {
		status = http.StatusCreated
	} else {
		w.Header().Set(HeaderReplayed, "true")
	}
	writeJSON(w, status, req.body(have))
}

// indices returns 0, 1, …, n-1.
func indices(n int) []int {
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	return all
}

// lookup fills have[i] from the receipts for each index i in idx and
// returns the indices still without a receipt (reusing idx).
func (s *Server) lookup(req *request, have []*receipt.Receipt, idx []int) []int {
	left := idx[:0]
	for _, i := range idx {
		have[i] = s.view.get(receipt.Key(req.tenant, req.key, i))
		if have[i] == nil {
			left = append(left, i)
		}
	}
	return left
}

// await waits, up to the request timeout, until the key is decided (won,
// when not given) and, if the request is the decided payload, every event
// has its receipt in have. It reports false if the time ran out, the
// server is stopping or the client went away.
func (s *Server) await(ctx context.Context, req *request, won *receipt.ClaimReceipt, have []*receipt.Receipt) (*receipt.ClaimReceipt, bool) {
	timer := time.NewTimer(s.cfg.Timeout)
	defer timer.Stop()
	missing := indices(len(req.items))
	for {
		changed := s.view.watch() // before looking: a receipt read after this closes it
		if won == nil {
			won = s.view.claim(req.tenant, req.key)
		}
		if won != nil {
			if req.compareClaim(won) != nil {
				return won, true // a conflict: its answer needs no receipt
			}
			if missing = s.lookup(req, have, missing); len(missing) == 0 {
				return won, true
			}
		}
		select {
		case <-changed:
			continue
		case <-timer.C:
		case <-s.stop:
		case <-ctx.Done():
		}
		return won, false
	}
}

// compare checks the receipts found against the request: a different shape
// (single or batch, event count) or fingerprint is a conflict.
func (req *request) compare(have []*receipt.Receipt) *failure {
	for i, rc := range have {
		switch {
		case rc == nil:
		case rc.Count != len(req.items) || rc.Batch != req.batch:
			return shapeConflict(rc.Count, rc.Batch)
		case rc.Fingerprint != req.items[i].fp:
			return req.payloadConflict(i, rc.Fingerprint)
		}
	}
	return nil
}

// compareClaim checks the key's decision against the request, as compare.
func (req *request) compareClaim(won *receipt.ClaimReceipt) *failure {
	if won.Count != len(req.items) || won.Batch != req.batch {
		return shapeConflict(won.Count, won.Batch)
	}
	for i, fp := range won.Fingerprints {
		if fp != req.items[i].fp {
			return req.payloadConflict(i, fp)
		}
	}
	return nil
}

// shapeConflict is the 409 of a request whose key was first used for a
// request of another shape.
func shapeConflict(count int, batch bool) *failure {
	return fail(409, HeaderKey, "this key was first used for a request of %d event(s) (batch: %v); use a new key for a different request", count, batch)
}

// payloadConflict is the 409 of a request whose event i differs from the
// first one under its key, whose fingerprint was fp.
func (req *request) payloadConflict(i int, fp string) *failure {
	field := "body"
	if req.batch {
		field = "events[" + strconv.Itoa(i) + "]"
	}
	return fail(409, field, "this key was first used with a different payload (fingerprint %s); use a new key for a different event", fp)
}

// receiptPath is where the receipts of a request are read (GET).
func receiptPath(key, tenant string) string {
	p := "/v1/receipts/" + url.PathEscape(key)
	if tenant != "" {
		p += "?tenant=" + url.QueryEscape(tenant)
	}
	return p
}

// eventBody is one event's committed outcome in a response: its receipt
// without the receipt's Origin, which the response states once
// (idempotencyKey, tenantId). The always-nil fields of noOrigin hide
// Origin's: encoding/json takes the shallower of two fields of one name, and
// omits them.
type eventBody struct {
	*receipt.Receipt
	noOrigin
}

type noOrigin struct {
	TenantID *struct{} `json:"tenantId,omitempty"`
	Key      *struct{} `json:"key,omitempty"`
	Index    *struct{} `json:"index,omitempty"`
	Count    *struct{} `json:"count,omitempty"`
	Batch    *struct{} `json:"batch,omitempty"`
}

// responseBody is a 200/201 body: one event's fields inline, or events.
type responseBody struct {
	IdempotencyKey string `json:"idempotencyKey"`
	TenantID       string `json:"tenantId,omitempty"`
	*eventBody
	Events []eventBody `json:"events,omitempty"`
}

// responseFor is the body of the receipts rs of one request: a function of
// the committed receipts alone, so that every instance, every time, gives
// the same bytes.
func responseFor(key, tenant string, batch bool, rs []*receipt.Receipt) []byte {
	b := responseBody{IdempotencyKey: key, TenantID: tenant}
	if batch {
		for _, rc := range rs {
			b.Events = append(b.Events, eventBody{Receipt: rc})
		}
	} else {
		b.eventBody = &eventBody{Receipt: rs[0]}
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
