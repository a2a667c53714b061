package ingressauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/harness/testkit"
)

// ecKey makes an ES256 key and its JWKS document.
func ecKey(t testing.TB, kid string) (*ecdsa.PrivateKey, []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	jwk, err := jwkset.NewJWKFromKey(&k.PublicKey, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid, ALG: jwkset.AlgES256}})
	if err != nil {
		t.Fatal(err)
	}
	s := jwkset.NewMemoryStorage()
	if err := s.KeyWrite(context.Background(), jwk); err != nil {
		t.Fatal(err)
	}
	doc, err := s.JSONPublic(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return k, doc
}

func signES(t *testing.T, k *ecdsa.PrivateKey, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodES256, claims)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func write(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path+".tmp", data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		t.Fatal(err)
	}
}

// TestJWTClock: exp, nbf and iat with the leeway on an injected clock; a
// remembered token is refused once it expires; a nested tenant claim.
func TestJWTClock(t *testing.T) {
	dir := t.TempDir()
	k, doc := ecKey(t, "k1")
	write(t, filepath.Join(dir, "jwks.json"), doc)
	now := time.Unix(2_000_000_000, 0)
	in := &config.Ingress{Listen: "127.0.0.1:0", Auth: &config.IngressAuth{JWT: &config.IngressJWT{
		JWKSFile: filepath.Join(dir, "jwks.json"), Issuer: "iss", Audience: "aud", TenantClaim: "/org/tenant~1id",
		Leeway: config.Duration(30 * time.Second)}}}
	g, err := New(in, Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	claims := func(kv ...any) jwt.MapClaims {
		c := jwt.MapClaims{"iss": "iss", "aud": []string{"other", "aud"}, "iat": now.Unix(), "exp": now.Add(time.Minute).Unix(),
			"org": map[string]any{"tenant/id": "acme"}}
		for i := 0; i+1 < len(kv); i += 2 {
			c[kv[i].(string)] = kv[i+1]
		}
		return c
	}
	verify := func(tok string) (string, string) {
		tenant, f := g.jwt.verify(context.Background(), tok)
		if f != nil {
			return "", f.reason
		}
		return tenant, ""
	}
	tok := signES(t, k, "k1", claims())
	if tenant, why := verify(tok); tenant != "acme" {
		t.Fatalf("valid token: %q %s, want acme from /org/tenant~1id", tenant, why)
	}
	for _, c := range []struct {
		claims jwt.MapClaims
		reason string
	}{
		{claims("exp", now.Add(-20*time.Second).Unix()), ""}, // within the leeway
		{claims("exp", now.Add(-40*time.Second).Unix()), reasonExpired},
		{claims("nbf", now.Add(20*time.Second).Unix()), ""},
		{claims("nbf", now.Add(40*time.Second).Unix()), reasonNotYetValid},
		{claims("iat", now.Add(40*time.Second).Unix()), reasonNotYetValid},
		{claims("exp", nil), reasonMalformed}, // exp is required
		{claims("org", map[string]any{"tenant/id": 7}), reasonNoTenant},
		{claims("org", "acme"), reasonNoTenant},
	} {
		if c.claims["exp"] == nil {
			delete(c.claims, "exp")
		}
		if _, why := verify(signES(t, k, "k1", c.claims)); why != c.reason {
			t.Errorf("%v: refused %q, want %q", c.claims, why, c.reason)
		}
	}
	// The remembered token stops working when it expires (exp + leeway),
	// as an unremembered one would.
	now = now.Add(time.Minute + 29*time.Second)
	if tenant, _ := verify(tok); tenant != "acme" {
		t.Fatal("the token refused within its leeway")
	}
	now = now.Add(2 * time.Second)
	if _, why := verify(tok); why != reasonExpired {
		t.Fatalf("a remembered token after exp + leeway: refused %q, want expired", why)
	}
}

// TestJWKSFromURL: the Gate is not ready until the URL is fetched; the
// keys are fetched again on schedule.
func TestJWKSFromURL(t *testing.T) {
	_, doc := ecKey(t, "k1")
	var fetches atomic.Int64
	var fail atomic.Bool
	fail.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fetches.Add(1)
		if fail.Load() {
			http.Error(w, "down", http.StatusBadGateway)
			return
		}
		_, _ = w.Write(doc)
	}))
	defer srv.Close()
	in := &config.Ingress{Listen: "127.0.0.1:0", Auth: &config.IngressAuth{JWT: &config.IngressJWT{
		JWKSURL: srv.URL, Issuer: "iss", Audience: "aud", TenantClaim: "tenant_id", JWKSRefresh: config.Duration(10 * time.Second)}}}
	g, err := New(in, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testkit.Await(t, 30*time.Second, "a failed fetch", func() bool { return fetches.Load() >= 1 })
	if ok, why := g.Ready(); ok || !strings.Contains(why, "JWKS") {
		t.Fatalf("ready %v (%s) before the JWKS was read", ok, why)
	}
	if _, f := g.jwt.verify(ctx, "a.b.c"); f == nil || f.reason != reasonKeysUnavailable || f.status() != 503 {
		t.Fatalf("a token before the keys: %+v, want 503 keys_unavailable", f)
	}
	fail.Store(false)
	testkit.Await(t, 30*time.Second, "the retried fetch", func() bool { ok, _ := g.Ready(); return ok })
}

// selfSigned makes a server certificate and key in PEM.
func selfSigned(t *testing.T, cn string) (certPEM, keyPEM []byte) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(k)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder})
}

// TestReloadOnSIGHUP: with polling far away, SIGHUP reloads the tokens
// file and the certificate at once; a broken certificate keeps the old.
func TestReloadOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	tokens, cert, key := filepath.Join(dir, "tokens"), filepath.Join(dir, "c.pem"), filepath.Join(dir, "k.pem")
	write(t, tokens, []byte(hashLine("old", "acme")+"\n"))
	c1, k1 := selfSigned(t, "first")
	write(t, cert, c1)
	write(t, key, k1)
	in := &config.Ingress{Listen: "0.0.0.0:8443", ReloadInterval: config.Duration(time.Hour),
		Auth: &config.IngressAuth{TokensFile: tokens}, TLS: &config.IngressTLS{CertFile: cert, KeyFile: key}}
	g, err := New(in, Options{})
	if err != nil {
		t.Fatal(err)
	}
	served := func() string {
		c, err := g.TLSConfig().GetConfigForClient(&tls.ClientHelloInfo{})
		if err != nil {
			t.Fatal(err)
		}
		return c.Certificates[0].Leaf.Subject.CommonName
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	defer func() { cancel(); <-done }()
	<-g.sighup // subscribed: the signal cannot end the test process now
	write(t, tokens, []byte(hashLine("new", "acme")+"\n"))
	c2, k2 := selfSigned(t, "second")
	write(t, cert, c2)
	write(t, key, k2)
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.Await(t, 30*time.Second, "the reload on SIGHUP", func() bool { _, ok := g.tokens.Load().lookup("new"); return ok && served() == "second" })
	if _, ok := g.tokens.Load().lookup("old"); ok {
		t.Fatal("the old token still works after the reload")
	}
	write(t, key, k1) // a key that does not match the certificate
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testkit.Await(t, 30*time.Second, "the refused reload", func() bool {
		v := g.metrics.reloads.WithLabelValues(fileTLS, "error")
		return testutil.ToFloat64(v) == 1
	})
	if served() != "second" {
		t.Fatal("a mismatched key replaced the certificate")
	}
}

// TestCertTenant: a client certificate's tenant from a URI SAN under the
// prefix, or the common name.
func TestCertTenant(t *testing.T) {
	u := func(s string) *url.URL { p, _ := url.Parse(s); return p }
	san := &config.IngressMTLS{TenantFrom: config.TenantFromSANURI, URIPrefix: "spiffe://ex.org/tenant/"}
	cn := &config.IngressMTLS{TenantFrom: config.TenantFromCN}
	for _, c := range []struct {
		m      *config.IngressMTLS
		cert   *x509.Certificate
		tenant string
	}{
		{san, &x509.Certificate{URIs: []*url.URL{u("spiffe://ex.org/ns/x"), u("spiffe://ex.org/tenant/acme")}}, "acme"},
		{san, &x509.Certificate{URIs: []*url.URL{u("spiffe://ex.org/tenant/a"), u("spiffe://ex.org/tenant/b")}}, ""},
		{san, &x509.Certificate{URIs: []*url.URL{u("spiffe://ex.org/tenant/")}}, ""},
		{san, &x509.Certificate{Subject: pkix.Name{CommonName: "acme"}}, ""},
		{cn, &x509.Certificate{Subject: pkix.Name{CommonName: "acme"}}, "acme"},
		{cn, &x509.Certificate{}, ""},
	} {
		tenant, f := certTenant(c.m, c.cert)
		if tenant != c.tenant || (f == nil) != (c.tenant != "") || (f != nil && f.reason != reasonClientCert) {
			t.Errorf("%+v %v: %q %+v, want %q", c.m, c.cert.URIs, tenant, f, c.tenant)
		}
	}
}
