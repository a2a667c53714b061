package ingress_test

import (
	"bytes"
	"crypto/tls"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/projector-dev/projector/internal/harness/testkit"
)

// TestIngressAuthTable covers every row of docs/ingress.md's authentication
// table against a running worker whose ingress serves TLS and accepts
// bearer tokens from a tokens file, JWTs (RS256, ES256) from a JWKS URL and
// client certificates, with a rate limit: no token, a bad token, the wrong
// tenant, an expired JWT, the wrong audience, a rotated JWKS key, mTLS with
// and without a client certificate, a reloaded tokens file, and 429 with
// Retry-After.
func TestIngressAuthTable(t *testing.T) {
	aw := startAuthWorld(t)
	for _, r := range []string{"missing", "malformed", "unknown_token", "bad_algorithm", "unknown_key", "bad_signature",
		"bad_issuer", "bad_audience", "expired", "not_yet_valid", "no_tenant", "client_cert", "tenant_mismatch", "keys_unavailable"} {
		if v, ok := metricValue(t, aw.reg, "projector_ingress_auth_failures_total", "reason", r); !ok || v != 0 {
			t.Fatalf("auth failures{reason=%q} = %v (exists %v) at start, want a series at 0", r, v, ok)
		}
	}
	u := aw.url
	post := func(c *http.Client, token, tenant, key, body string) reply {
		return authCall{client: c, method: "POST", path: "/v1/events", token: token, tenant: tenant, key: key, body: body}.do(t, u)
	}
	get := func(c *http.Client, token, path string) reply {
		return authCall{client: c, method: "GET", path: path, token: token}.do(t, u)
	}

	// No credential, a bad one, a malformed header: 401, nothing written.
	expectRefused(t, "no token", post(aw.plain, "", "", "k-0", event("A-0")), 401, "")
	expectRefused(t, "bad token", post(aw.plain, "not-a-known-token", "", "k-0", event("A-0")), 401, "invalid_token")
	req, _ := http.NewRequest("POST", u+"/v1/events", strings.NewReader(event("A-0")))
	req.Header.Set("Authorization", "Basic "+aw.acme)
	req.Header.Set("Idempotency-Key", "k-0")
	resp, err := aw.plain.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	expectRefused(t, "Basic scheme", reply{resp.StatusCode, resp.Header, []byte("{}")}, 401, "invalid_request")

	// A token of the file: the tenant is the credential's, with or without
	// an X-Tenant-ID that agrees.
	first := post(aw.plain, aw.acme, "", "k-1", event("A-1"))
	if first.code != 201 || decodeOK(t, first).TenantID != "acme" {
		t.Fatalf("acme's token: %d %s, want 201 for tenant acme", first.code, first.body)
	}
	if r := post(aw.plain, aw.acme, "acme", "k-1", event("A-1")); r.code != 200 || !bytes.Equal(r.body, first.body) {
		t.Fatalf("acme's replay with X-Tenant-ID acme: %d %s", r.code, r.body)
	}
	// The wrong tenant: 403 for a header or ?tenant= naming another; the
	// receipts of another tenant are not found.
	expectRefused(t, "X-Tenant-ID of another tenant", post(aw.plain, aw.acme, "globex", "k-2", event("A-2")), 403, "")
	expectRefused(t, "?tenant= of another tenant", get(aw.plain, aw.acme, "/v1/receipts/k-1?tenant=globex"), 403, "")
	if r := get(aw.plain, aw.acme, "/v1/receipts/k-1"); r.code != 200 || !bytes.Equal(r.body, first.body) {
		t.Fatalf("acme reads its receipt: %d %s", r.code, r.body)
	}
	if r := get(aw.plain, aw.acme, "/v1/receipts/k-1?tenant=acme"); r.code != 200 {
		t.Fatalf("acme reads its receipt with ?tenant=acme: %d %s", r.code, r.body)
	}
	problemField(t, get(aw.plain, aw.globex, "/v1/receipts/k-1"), 404, "key")
	if r := post(aw.plain, aw.globex, "", "k-1", event("G-1")); r.code != 201 || decodeOK(t, r).TenantID != "globex" {
		t.Fatalf("the same key for globex: %d %s, want its own 201", r.code, r.body)
	}

	aw.jwtRows(t, post)
	aw.mtlsRows(t, post)
	aw.reloadRows(t, post)
	aw.rateLimitRows(t, post, get)

	want := map[string]float64{"missing": 2, "malformed": 2, "bad_algorithm": 2, "unknown_key": 2, "bad_signature": 1,
		"bad_issuer": 1, "bad_audience": 1, "expired": 1, "not_yet_valid": 1, "no_tenant": 1, "client_cert": 1,
		"tenant_mismatch": 2, "unknown_token": 2, "keys_unavailable": 0}
	for reason, n := range want {
		if v, _ := metricValue(t, aw.reg, "projector_ingress_auth_failures_total", "reason", reason); v != n {
			t.Errorf("auth failures{reason=%q} = %v, want %v", reason, v, n)
		}
	}
	var exposition strings.Builder // every label value of every series
	mfs, _ := aw.w.app.Registry.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				exposition.WriteString(l.GetValue() + "\n")
			}
		}
	}
	logs := aw.log.String()
	if os.Getenv("PROJECTOR_TEST_LOG") != "" { // the worker's log lines, as elsewhere
		t.Log(logs)
	}
	for _, s := range aw.secrets {
		if strings.Contains(logs, s) || strings.Contains(exposition.String(), s) {
			t.Errorf("a token appears in the logs or the metrics")
		}
	}
	if n := strings.Count(logs, `level=WARN msg="ingress:`); n != 0 {
		t.Errorf("%d WARN lines of the ingress with authentication on a loopback TLS listener, want none:\n%s", n, logs)
	}
}

type poster func(c *http.Client, token, tenant, key, body string) reply

// jwtRows: RS256 and ES256 tokens, each claim check, and a rotated key.
func (aw *authWorld) jwtRows(t *testing.T, post poster) {
	valid := jwtClaims("jwt-rsa")
	tok := aw.rsa.sign(t, valid)
	aw.secrets = append(aw.secrets, tok)
	if r := post(aw.plain, tok, "", "j-1", event("J-1")); r.code != 201 || decodeOK(t, r).TenantID != "jwt-rsa" {
		t.Fatalf("RS256 token: %d %s, want 201 for tenant jwt-rsa", r.code, r.body)
	}
	if r := post(aw.plain, aw.ec.sign(t, jwtClaims("jwt-ec")), "", "j-2", event("J-2")); r.code != 201 || decodeOK(t, r).TenantID != "jwt-ec" {
		t.Fatalf("ES256 token: %d %s, want 201 for tenant jwt-ec", r.code, r.body)
	}
	now := time.Now()
	hs := jwt.NewWithClaims(jwt.SigningMethodHS256, valid)
	hs.Header["kid"] = "k-rsa"
	hsTok, _ := hs.SignedString([]byte("a shared secret"))
	noneTok, _ := jwt.NewWithClaims(jwt.SigningMethodNone, valid).SignedString(jwt.UnsafeAllowNoneSignatureType)
	forged := newRSAKey(t, "k-rsa") // another key claiming the known kid
	for _, c := range []struct {
		what, token string
	}{
		{"expired JWT", aw.rsa.sign(t, with(valid, "iat", now.Add(-2*time.Hour).Unix(), "exp", now.Add(-time.Hour).Unix()))},
		{"wrong audience", aw.rsa.sign(t, with(valid, "aud", "another-service"))},
		{"wrong issuer", aw.rsa.sign(t, with(valid, "iss", "https://evil.test/"))},
		{"not yet valid", aw.rsa.sign(t, with(valid, "nbf", now.Add(time.Hour).Unix()))},
		{"no tenant claim", aw.ec.sign(t, with(valid, "tenant_id", nil))},
		{"HS256", hsTok},
		{"alg none", noneTok},
		{"forged signature", forged.sign(t, valid)},
		{"malformed JWT", "abc.def.ghi"},
	} {
		expectRefused(t, c.what, post(aw.plain, c.token, "", "j-x", event("J-X")), 401, map[bool]string{true: "invalid_request", false: "invalid_token"}[c.what == "malformed JWT"])
	}
	// A rotated key: the JWKS now holds only a new key; its first token
	// fetches the set at once.
	before := aw.jwks.fetches.Load()
	rotated := newRSAKey(t, "k-rsa-2")
	aw.jwks.set(t, rotated)
	if r := post(aw.plain, rotated.sign(t, jwtClaims("jwt-rotated")), "", "j-3", event("J-3")); r.code != 201 || decodeOK(t, r).TenantID != "jwt-rotated" {
		t.Fatalf("token of the rotated key: %d %s, want 201", r.code, r.body)
	}
	if n := aw.jwks.fetches.Load() - before; n != 1 {
		t.Fatalf("%d JWKS fetches for the rotated key, want 1", n)
	}
	// Another unknown key id right after: refused without a fetch (the
	// refreshes for unknown keys are rate-limited); and the token of the
	// key that left the set is refused too (verified tokens are not
	// remembered across a key change).
	ghost := newRSAKey(t, "k-ghost")
	expectRefused(t, "unknown kid", post(aw.plain, ghost.sign(t, jwtClaims("jwt-rsa")), "", "j-4", event("J-4")), 401, "invalid_token")
	expectRefused(t, "the retired key's token", post(aw.plain, tok, "", "j-1", event("J-1")), 401, "invalid_token")
	if n := aw.jwks.fetches.Load() - before; n != 1 {
		t.Fatalf("%d JWKS fetches after an unknown kid, want still 1", n)
	}
}

// mtlsRows: a client certificate names the tenant; without one (and
// without a token) the request is refused; one of an unknown CA does not
// get through the handshake.
func (aw *authWorld) mtlsRows(t *testing.T, post poster) {
	r := post(aw.initech, "", "", "m-1", event("M-1"))
	if r.code != 201 || decodeOK(t, r).TenantID != "initech" {
		t.Fatalf("client certificate of initech: %d %s, want 201 for tenant initech", r.code, r.body)
	}
	expectRefused(t, "mTLS without a client certificate", post(aw.plain, "", "", "m-2", event("M-2")), 401, "")
	_, _, cnOnly := aw.ca.issue(t, "no-uri-client", false)
	expectRefused(t, "a client certificate naming no tenant", post(httpsClient(aw.ca, cnOnly), "", "", "m-3", event("M-3")), 401, "")
	rogueCA := newCA(t, "rogue CA")
	_, _, rogue := rogueCA.issue(t, "rogue", false, "spiffe://test.example/tenant/initech")
	req, _ := http.NewRequest("POST", aw.url+"/v1/events", strings.NewReader(event("M-4")))
	req.Header.Set("Idempotency-Key", "m-4")
	rc := httpsClient(aw.ca)
	// Presented whatever CAs the server asks for (Go's client would
	// otherwise send none, and this would be the row above).
	rc.Transport.(*http.Transport).TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &rogue, nil
	}
	if resp, err := rc.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("a client certificate of an unknown CA got an answer: %d", resp.StatusCode)
	}
	// A token decides when given, also next to a certificate.
	if r := post(aw.initech, aw.globex, "", "m-5", event("M-5")); r.code != 201 || decodeOK(t, r).TenantID != "globex" {
		t.Fatalf("a token with a client certificate: %d %s, want the token's tenant", r.code, r.body)
	}
}

// reloadRows: the tokens file rewritten while the worker runs: a new
// credential works and a removed one does not, without a restart; a broken
// file keeps the set loaded before.
func (aw *authWorld) reloadRows(t *testing.T, post poster) {
	reloads := func(result string) float64 {
		v, _ := metricValue(t, aw.reg, "projector_ingress_reloads_total", "file", "tokens", "result", result)
		return v
	}
	writeFile(t, aw.tokensFile, []byte(tokenLine(aw.umbrella, "umbrella")+tokenLine(aw.globex, "globex")+tokenLine(aw.lim, "limited")))
	testkit.Await(t, 30*time.Second, "the tokens file to be reloaded", func() bool { return reloads("ok") == 1 })
	if r := post(aw.plain, aw.umbrella, "", "u-1", event("U-1")); r.code != 201 || decodeOK(t, r).TenantID != "umbrella" {
		t.Fatalf("a token added to the file: %d %s, want 201", r.code, r.body)
	}
	expectRefused(t, "a token removed from the file", post(aw.plain, aw.acme, "", "k-9", event("A-9")), 401, "invalid_token")
	writeFile(t, aw.tokensFile, []byte("this line is no credential\n"))
	testkit.Await(t, 30*time.Second, "the broken tokens file to be refused", func() bool { return reloads("error") == 1 })
	if r := post(aw.plain, aw.umbrella, "", "u-2", event("U-2")); r.code != 201 {
		t.Fatalf("after a broken reload: %d %s, want the previous credentials kept", r.code, r.body)
	}
	if !strings.Contains(aw.log.String(), "ingress.auth.tokensFile is invalid; keeping the previous version") {
		t.Fatalf("a broken reload logged no error")
	}
}

// rateLimitRows: tenant limited has 3 requests per hour: the fourth write
// is 429 with Retry-After; a replay of a committed key is not charged and
// answers 200 while the tenant is over its limit.
func (aw *authWorld) rateLimitRows(t *testing.T, post poster, get func(*http.Client, string, string) reply) {
	for i := range 3 {
		key := "l-" + strconv.Itoa(i)
		if r := post(aw.plain, aw.lim, "", key, event("L-"+strconv.Itoa(i))); r.code != 201 {
			t.Fatalf("limited's request %d: %d %s, want 201 within its burst", i, r.code, r.body)
		}
	}
	r := post(aw.plain, aw.lim, "", "l-3", event("L-3"))
	problemField(t, r, 429, "")
	ra, err := strconv.Atoi(r.hdr.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 3600 {
		t.Fatalf("429 Retry-After %q, want whole seconds up to the hour it takes to refill", r.hdr.Get("Retry-After"))
	}
	if r := post(aw.plain, aw.lim, "", "l-0", event("L-0")); r.code != 200 {
		t.Fatalf("a replay while over the limit: %d %s, want 200 (replays are not charged)", r.code, r.body)
	}
	if r := get(aw.plain, aw.lim, "/v1/receipts/l-1"); r.code != 200 {
		t.Fatalf("a receipt read while over the limit: %d", r.code)
	}
	problemField(t, post(aw.plain, aw.lim, "", "l-4", event("L-4")), 429, "")
	// Other tenants have their own buckets.
	if r := post(aw.plain, aw.globex, "", "g-2", event("G-2")); r.code != 201 {
		t.Fatalf("another tenant while limited is over: %d %s", r.code, r.body)
	}
}
