package ingress_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/ingress"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/harness/testkit"
)

const authConfig = `name: ing
kafka: {brokers: [%s], instanceId: a1, input: [events], transactionTimeout: 20s}
state: {dir: %q}
http: {listen: "off"}
ingress:
  listen: 127.0.0.1:0
  timeout: 5s
  reloadInterval: 20ms
  auth:
    tokensFile: %q
    jwt: {jwksURL: %q, issuer: "https://idp.test/", audience: projector-test}
    mtls: {tenantFrom: san-uri, uriPrefix: "spiffe://test.example/tenant/"}
  tls: {certFile: %q, keyFile: %q, clientCAFile: %q}
  rateLimit: {requests: 1, per: 1h, burst: 3}
projections:
  - {name: overview, topic: overview.v1, events: {CaseOpened: merge}}
`

// lockedBuffer collects a worker's log lines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// authCall is one request of the auth table.
type authCall struct {
	client              *http.Client
	method, path, token string
	tenant, key, body   string
}

func (c authCall) do(t *testing.T, base string) reply {
	t.Helper()
	var body *strings.Reader
	if c.body != "" {
		body = strings.NewReader(c.body)
	} else {
		body = strings.NewReader("")
	}
	req, err := http.NewRequest(c.method, base+c.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.tenant != "" {
		req.Header.Set(ingress.HeaderTenant, c.tenant)
	}
	if c.key != "" {
		req.Header.Set(ingress.HeaderKey, c.key)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", c.method, c.path, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return reply{resp.StatusCode, resp.Header, b.Bytes()}
}

func event(id string) string {
	return `{"eventType":"CaseOpened","aggregateId":"` + id + `","aggregateVersion":1,"payload":{}}`
}

// metricValue reads one series of a counter from reg; found is false when
// the series does not exist.
func metricValue(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) (v float64, found bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// authWorld is the running worker of the auth table and what it trusts.
type authWorld struct {
	w                  *worker
	url                string
	ca                 *testCA
	jwks               *jwksServer
	tokensFile         string
	log                *lockedBuffer
	plain, initech     *http.Client // TLS clients: without and with a client certificate
	rsa, ec            signingKey
	reg                prometheus.Gatherer
	secrets            []string // every token used: none may be logged
	acme, globex, lim  string   // bearer tokens
	umbrella, rotation string
}

func startAuthWorld(t *testing.T) *authWorld {
	t.Helper()
	b, _ := testkit.Broker(t, 2, "events")
	dir := t.TempDir()
	aw := &authWorld{ca: newCA(t, "projector test CA"), log: &lockedBuffer{},
		acme: "acme-" + rand.Text(), globex: "globex-" + rand.Text(), lim: "limited-" + rand.Text(),
		umbrella: "umbrella-" + rand.Text()}
	aw.secrets = []string{aw.acme, aw.globex, aw.lim, aw.umbrella}
	certPEM, keyPEM, _ := aw.ca.issue(t, "ingress", true)
	files := map[string][]byte{"cert.pem": certPEM, "key.pem": keyPEM, "ca.pem": aw.ca.pem,
		"tokens": []byte("# ingress credentials\n" + tokenLine(aw.acme, "acme") + tokenLine(aw.globex, "globex") +
			tokenLine(aw.lim, "limited") + "  # a comment line\n")}
	for name, data := range files {
		writeFile(t, filepath.Join(dir, name), data)
	}
	aw.tokensFile = filepath.Join(dir, "tokens")
	aw.rsa, aw.ec = newRSAKey(t, "k-rsa"), newECKey(t, "k-ec")
	aw.jwks = newJWKSServer(t, aw.rsa, aw.ec)
	src := fmt.Sprintf(authConfig, b.Addr(), filepath.Join(dir, "state"), aw.tokensFile, aw.jwks.URL+"/jwks.json",
		filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"), filepath.Join(dir, "ca.pem"))
	cfg, err := config.Parse([]byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(aw.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a, err := wiring.New(cfg, wiring.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	aw.w = runWorker(t, a, "a1")
	aw.url = "https://" + a.Ingress.Addr().String()
	aw.reg = a.Registry
	_, _, initech := aw.ca.issue(t, "initech-client", false, "spiffe://test.example/tenant/initech")
	aw.plain, aw.initech = httpsClient(aw.ca), httpsClient(aw.ca, initech)
	return aw
}

// runWorker runs a built worker until the test ends and waits until it is
// ready.
func runWorker(t *testing.T, a *wiring.App, instance string) *worker {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	w := &worker{app: a, cancel: cancel, stop: func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker %s: %v", instance, err)
		}
		a.Close()
	}}
	t.Cleanup(func() {
		if ctx.Err() == nil {
			w.stop()
		}
	})
	<-a.Ingress.Listening()
	testkit.Await(t, 30*time.Second, "the worker to be ready", func() bool { ok, _ := a.Ready(); return ok })
	return w
}

// jwtClaims are valid claims for tenant, now.
func jwtClaims(tenant string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{"iss": "https://idp.test/", "aud": "projector-test", "sub": "client-1",
		"iat": now.Unix(), "exp": now.Add(10 * time.Minute).Unix(), "tenant_id": tenant}
}

// with returns claims with changes (a nil value deletes).
func with(c jwt.MapClaims, kv ...any) jwt.MapClaims {
	out := jwt.MapClaims{}
	for k, v := range c {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == nil {
			delete(out, kv[i].(string))
		} else {
			out[kv[i].(string)] = kv[i+1]
		}
	}
	return out
}

// expectRefused checks a refusal: status, problem body, and for a 401 the
// RFC 6750 challenge with its error code ("" for none).
func expectRefused(t *testing.T, what string, r reply, status int, bearerError string) {
	t.Helper()
	if r.code != status || r.hdr.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("%s: %d %s %s, want %d with a problem body", what, r.code, r.hdr.Get("Content-Type"), r.body, status)
	}
	if status != http.StatusUnauthorized {
		return
	}
	ch := r.hdr.Get("WWW-Authenticate")
	if !strings.HasPrefix(ch, `Bearer realm="projector"`) {
		t.Fatalf("%s: WWW-Authenticate %q, want a Bearer challenge", what, ch)
	}
	if got := strings.Contains(ch, "error="); got != (bearerError != "") || !strings.Contains(ch, bearerError) {
		t.Fatalf("%s: WWW-Authenticate %q, want error=%q", what, ch, bearerError)
	}
}
