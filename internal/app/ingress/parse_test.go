package ingress

import (
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestParseBody pins how a POST body is parsed: the answer to each body
// that is not a valid request, and the record values of valid ones.
func TestParseBody(t *testing.T) {
	s := &Server{cfg: Config{MaxBodyBytes: 1 << 20, MaxBatch: 2, MaxRecordBytes: 1 << 20}}
	ev := `{"eventType":"T","aggregateId":"A","aggregateVersion":1,"payload":{"b":1,"a":[2]}}`
	for _, c := range []struct{ body, tenant, want string }{
		{``, "", `400 body: the body is not JSON`},
		{`   `, "", `400 body: the body is not JSON`},
		{`x`, "", `400 body: the body is not JSON`},
		{`{`, "", `400 body: the body is not JSON`},
		{`{"a":1} x`, "", `400 body: the body is not JSON`},
		{`null`, "", `422 body: the body must be a JSON object: an event envelope or {"events":[…]}`},
		{`[1,2]`, "", `422 body: the body must be a JSON object: an event envelope or {"events":[…]}`},
		{`"s"`, "", `422 body: the body must be a JSON object: an event envelope or {"events":[…]}`},
		{`{"events":1}`, "", `422 events: events must be an array of event envelopes`},
		{`{"events":[]}`, "", `422 events: events must hold 1 to 2 envelopes (ingress.maxBatch), got 0`},
		{`{"events":[1]}`, "", `422 events[0].value: an event envelope must be a JSON object`},
		{`{"events":[null]}`, "", `422 events[0].value: an event envelope must be a JSON object`},
		{`{"events":[` + ev + `,{"tenantId":"t2","eventType":"T","aggregateId":"A","aggregateVersion":2}]}`, "",
			`422 events[1].tenantId: every event of a request must have the same tenantId (""), got "t2"`},
		{`{"tenantId":5,"eventType":"T"}`, "", `422 tenantId: tenantId must be a string`},
		{`{"tenantId":"t9","eventType":"T"}`, "t1", `422 tenantId: tenantId "t9" differs from the request's tenant "t1" (X-Tenant-ID, or the credential's); omit it or make them equal`},
		{`{"eventId":"x","eventType":"T"}`, "", `422 eventId: eventId is derived from the tenant and the Idempotency-Key: omit it, or send "ik-b8995ad0db599ac587c3a4048d1c7191"`},
		{`{"eventType":"T","aggregateVersion":1}`, "", `422 aggregateId: required field is missing`},
		{ev, "t1", `ok {"eventId":"ik-f201e12c49b99df8ec82841d32d928a8","tenantId":"t1",` + ev[1:] +
			` 6d506608b04de49563b461155a80583e1a53169596d146b6ea5521d7b55f0745`},
		{` {"events":[` + ev + `, ` + ev + `]} `, "", `ok {"eventId":"ik-b8995ad0db599ac587c3a4048d1c7191",` + ev[1:] +
			` 0150984875f3d91b772b005a31fdcc4a84518cc78515a9545a147445538cae5c {"eventId":"ik-bdc7d029c8331ac4d7b9e748084f67d0",` + ev[1:] +
			` 0150984875f3d91b772b005a31fdcc4a84518cc78515a9545a147445538cae5c`},
		{`{"tenantId":null,"eventType":"T","aggregateId":"A","aggregateVersion":1}`, "",
			`ok {"eventId":"ik-b8995ad0db599ac587c3a4048d1c7191","tenantId":null,"eventType":"T","aggregateId":"A","aggregateVersion":1} b26f017df6b6222227266331d13137386ce0ba08aa6d62e0a16c7f850bb23a65`},
	} {
		r := httptest.NewRequest("POST", "/v1/events", strings.NewReader(c.body))
		r.Header.Set(HeaderKey, "k")
		if c.tenant != "" {
			r.Header.Set(HeaderTenant, c.tenant)
		}
		req, f := s.parse(httptest.NewRecorder(), r)
		var got string
		if f != nil {
			got = fmt.Sprintf("%d %s: %s", f.status, f.field, f.detail)
		} else {
			got = "ok"
			for _, it := range req.items {
				got += " " + string(it.value) + " " + it.fp
			}
		}
		if got != c.want {
			t.Errorf("body %s:\n got %s\nwant %s", c.body, got, c.want)
		}
	}
}

// TestParseTenantKeepsHTML: a tenant given by header is added to the
// record value with <, > and & as they are (a tenant is printable ASCII),
// not as json.Marshal's \u003c escapes; the value still decodes to it.
func TestParseTenantKeepsHTML(t *testing.T) {
	s := &Server{cfg: Config{MaxBodyBytes: 1 << 20, MaxBatch: 2, MaxRecordBytes: 1 << 20}}
	r := httptest.NewRequest("POST", "/v1/events", strings.NewReader(`{"eventType":"T","aggregateId":"A","aggregateVersion":1}`))
	r.Header.Set(HeaderKey, "k")
	r.Header.Set(HeaderTenant, `<t&"x">`)
	req, f := s.parse(httptest.NewRecorder(), r)
	if f != nil {
		t.Fatalf("%d %s: %s", f.status, f.field, f.detail)
	}
	v := string(req.items[0].value)
	if !strings.Contains(v, `"tenantId":"<t&\"x\">"`) || strings.Contains(v, `\u00`) {
		t.Errorf("value %s: want the tenant with <, > and & literal", v)
	}
	if req.items[0].ev.TenantID != `<t&"x">` {
		t.Errorf("the value decodes to tenant %q", req.items[0].ev.TenantID)
	}
}

// TestClaimTooLarge: a request travels as one claim record, which must fit
// kafka.maxRecordBytes + 8 KiB; a batch whose events each fit but whose
// claim does not is refused with 413 before anything is written.
func TestClaimTooLarge(t *testing.T) {
	s := &Server{cfg: Config{MaxBodyBytes: 1 << 20, MaxBatch: 100, MaxRecordBytes: 1 << 10}}
	ev := `{"eventType":"T","aggregateId":"A","payload":"` + strings.Repeat("x", 850) + `"}`
	for _, c := range []struct {
		events int
		want   string
	}{{8, "ok"}, {12, "413 body"}} {
		body := `{"events":[` + strings.TrimSuffix(strings.Repeat(ev+",", c.events), ",") + `]}`
		r := httptest.NewRequest("POST", "/v1/events", strings.NewReader(body))
		r.Header.Set(HeaderKey, "k")
		req, f := s.parse(httptest.NewRecorder(), r)
		got := "ok"
		if f != nil {
			got = fmt.Sprintf("%d %s", f.status, f.field)
		} else if len(req.claim) > 9<<10 || req.id == "" {
			t.Errorf("%d events: a claim of %d bytes, id %q", c.events, len(req.claim), req.id)
		}
		if got != c.want {
			t.Errorf("%d events of %d bytes: %s, want %s", c.events, len(ev), got, c.want)
		}
	}
}
