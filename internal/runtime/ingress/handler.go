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

	"github.com/projector-dev/projector/internal/runtime/envelope"
	"github.com/projector-dev/projector/internal/runtime/receipt"
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
	}
	tenant, hasTenant, ok := headerValue(r, HeaderTenant)
	switch {
	case !hasTenant && s.cfg.RequireTenant:
		return nil, fail(400, HeaderTenant, "the %s header is required", HeaderTenant)
	case hasTenant && (!ok || !printable(tenant)):
		return nil, fail(400, HeaderTenant, "%s must be given once, 1 to %d printable ASCII characters", HeaderTenant, MaxKeyLen)
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
	req := &request{key: key, tenant: tenant}
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
	return req, nil
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
		return item{}, fail(422, prefix+"tenantId", "tenantId %q differs from the %s header %q; omit it or make them equal", bodyTenant, HeaderTenant, req.tenant)
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
		b, _ := json.Marshal(req.tenant)
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
	ev, err := envelope.Decode(value, s.cfg.MaxRecordBytes)
	if err != nil {
		var ee *envelope.Error
		if errors.As(err, &ee) {
			return item{}, fail(422, prefix+ee.Field, "%s", ee.Msg)
		}
		return item{}, fail(422, prefix+"value", "%v", err)
	}
	fp := ev.Fingerprint()
	return item{value: value, ev: ev, fp: hex.EncodeToString(fp[:])}, nil
}

// handle answers a parsed request from the receipts, writing the events
// that have none first.
func (s *Server) handle(w http.ResponseWriter, r *http.Request, req *request) {
	have := make([]*receipt.Receipt, len(req.items))
	all := make([]int, len(req.items))
	for i := range all {
		all[i] = i
	}
	missing := s.lookup(req, have, all)
	if f := req.compare(have); f != nil {
		writeProblem(w, f.status, f.field, "%s", f.detail)
		return
	}
	if len(missing) == 0 {
		w.Header().Set(HeaderReplayed, "true")
		writeJSON(w, http.StatusOK, req.body(have))
		return
	}
	ours, err := s.produce(r.Context(), req, missing)
	if err != nil {
		s.cfg.Logger.Warn("ingress: produce failed", "topic", s.cfg.Topic, "err", err)
		writeProblem(w, http.StatusServiceUnavailable, "", "the event could not be written (%v); retry with the same key", err)
		return
	}
	if !s.await(r.Context(), req, have, missing) {
		// Not committed (or not read) yet: the record is written, so the
		// outcome will be committed; the client polls or retries.
		w.Header().Set("Location", receiptPath(req.key, req.tenant))
		writeJSON(w, http.StatusAccepted, req.pending())
		return
	}
	// Another request (here or on another instance) may have won the race
	// with another payload: the receipt holds the first committed one.
	if f := req.compare(have); f != nil {
		writeProblem(w, f.status, f.field, "%s", f.detail)
		return
	}
	status := http.StatusOK
	for _, rc := range have {
		if rc.Topic == s.cfg.Topic && ours[[2]int64{int64(rc.Partition), rc.Offset}] {
			status = http.StatusCreated
		}
	}
	if status == http.StatusOK {
		w.Header().Set(HeaderReplayed, "true")
	}
	writeJSON(w, status, req.body(have))
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

// produce writes the events at the indices missing and waits for the
// acknowledgements, returning the partition and offset of each record
// written. Some may have been written before (a request that failed
// half-way, or another instance taking the same retry): the same event id
// makes them duplicates.
//
// The wait is bounded by the request timeout: with the brokers away the
// client retries a batch it has sent for as long as it takes (an
// idempotent producer cannot drop it), so the answer does not wait for it.
// A record not acknowledged in time may still land; the retry the 503 asks
// for carries the same event id.
func (s *Server) produce(ctx context.Context, req *request, missing []int) (map[[2]int64]bool, error) {
	recs := make([]*kgo.Record, 0, len(missing))
	for _, i := range missing {
		it := req.items[i]
		o, _ := json.Marshal(receipt.Origin{TenantID: req.tenant, Key: req.key, Index: i, Count: len(req.items), Batch: req.batch})
		recs = append(recs, &kgo.Record{Topic: s.cfg.Topic, Key: []byte(it.ev.AggregateID), Value: it.value,
			Headers: []kgo.RecordHeader{{Key: receipt.Header, Value: o}}})
	}
	pctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	acked := make(chan error, len(recs)) // buffered: a late promise never blocks
	for _, rec := range recs {
		s.producer.Produce(pctx, rec, func(_ *kgo.Record, err error) { acked <- err })
	}
	var err error
	for range recs {
		select {
		case e := <-acked:
			err = errors.Join(err, e)
			continue
		case <-pctx.Done():
			err = fmt.Errorf("not acknowledged within %s: %w", s.cfg.Timeout, pctx.Err())
		}
		break
	}
	if err != nil {
		return nil, err
	}
	ours := make(map[[2]int64]bool, len(recs))
	for _, rec := range recs {
		ours[[2]int64{int64(rec.Partition), rec.Offset}] = true
	}
	return ours, nil
}

// await waits, up to the request timeout, until every index in missing has
// a receipt in have. It reports false if the time ran out, the server is
// stopping or the client went away.
func (s *Server) await(ctx context.Context, req *request, have []*receipt.Receipt, missing []int) bool {
	timer := time.NewTimer(s.cfg.Timeout)
	defer timer.Stop()
	for {
		changed := s.view.watch() // before looking: a receipt read after this closes it
		if missing = s.lookup(req, have, missing); len(missing) == 0 {
			return true
		}
		select {
		case <-changed:
			continue
		case <-timer.C:
		case <-s.stop:
		case <-ctx.Done():
		}
		return false
	}
}

// compare checks the receipts found against the request: a different shape
// (single or batch, event count) or fingerprint is a conflict.
func (req *request) compare(have []*receipt.Receipt) *failure {
	for i, rc := range have {
		switch {
		case rc == nil:
		case rc.Count != len(req.items) || rc.Batch != req.batch:
			return fail(409, HeaderKey, "this key was first used for a request of %d event(s) (batch: %v); use a new key for a different request", rc.Count, rc.Batch)
		case rc.Fingerprint != req.items[i].fp:
			field := "body"
			if req.batch {
				field = "events[" + strconv.Itoa(i) + "]"
			}
			return fail(409, field, "this key was first used with a different payload (fingerprint %s); use a new key for a different event", rc.Fingerprint)
		}
	}
	return nil
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
