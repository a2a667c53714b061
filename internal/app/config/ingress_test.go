package config

import (
	"strings"
	"testing"
	"time"
)

const ingressBase = `name: ing
kafka: {brokers: embedded, input: [a, b]}
projections:
  - {name: p, topic: p.v1, events: {A: merge}}
`

// TestIngressConfig: absent is off; present takes its defaults; bad values
// are named by key.
func TestIngressConfig(t *testing.T) {
	c, err := Parse([]byte(ingressBase), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Ingress != nil || c.Ingress.Enabled() {
		t.Fatalf("ingress absent: got %+v", c.Ingress)
	}
	c, err = Parse([]byte(ingressBase+"ingress: {listen: 127.0.0.1:8080}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	in := c.Ingress
	if !in.Enabled() || in.Topic != "a" || in.ReceiptsTopic != "ing.receipts" || in.ClaimsTopic != "ing.claims" || in.Timeout.Std() != 10*time.Second ||
		in.MaxBodyBytes != c.Kafka.MaxRecordBytes || in.MaxBatch != 100 || in.RequireTenant {
		t.Fatalf("ingress defaults: %+v", in)
	}
	c, err = Parse([]byte(ingressBase+"ingress: {listen: \"off\"}\n"), nil)
	if err != nil || c.Ingress == nil || c.Ingress.Enabled() {
		t.Fatalf("listen off: %v %+v", err, c.Ingress)
	}
	for _, tc := range []struct{ yaml, key string }{
		{"ingress: {}", "ingress.listen"},
		{"ingress: {listen: nohost}", "ingress.listen"},
		{"ingress: {listen: 127.0.0.1:9464}", "ingress.listen"}, // the http.listen default
		{"ingress: {listen: 127.0.0.1:8080, topic: c}", "ingress.topic"},
		{"ingress: {listen: 127.0.0.1:8080, receiptsTopic: 'x y'}", "ingress.receiptsTopic"},
		{"ingress: {listen: 127.0.0.1:8080, receiptsTopic: b}", `ingress.receiptsTopic: topic "b" is also an input topic`},
		{"ingress: {listen: 127.0.0.1:8080, receiptsTopic: p.v1}", `ingress.receiptsTopic: topic "p.v1" is already used by projections[0].topic`},
		{"ingress: {listen: 127.0.0.1:8080, receiptsTopic: ing.dlq}", `ingress.receiptsTopic: topic "ing.dlq" is already used by kafka.deadLetterTopic`},
		{"ingress: {listen: 127.0.0.1:8080, claimsTopic: a}", `ingress.claimsTopic: topic "a" is also an input topic`},
		{"ingress: {listen: 127.0.0.1:8080, claimsTopic: ing.receipts}", `ingress.claimsTopic: topic "ing.receipts" is already used by ingress.receiptsTopic`},
		{"ingress: {listen: 127.0.0.1:8080, timeout: -1s}", "ingress.timeout"},
		{"ingress: {listen: 127.0.0.1:8080, maxBatch: 20000}", "ingress.maxBatch"},
		{"ingress: {listen: 127.0.0.1:8080, maxBodyBytes: 1}", "ingress.maxBodyBytes"},
		{"ingress: {listen: 127.0.0.1:8080, tenants: x}", "ingress.tenants"},
	} {
		_, err := Parse([]byte(ingressBase+tc.yaml+"\n"), nil)
		if err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s: got %v, want an error naming %s", tc.yaml, err, tc.key)
		}
	}
}

// TestIngressAuthRequired: an ingress listening beyond loopback without
// ingress.auth is refused naming the key; loopback may go without; `auth:
// none` states it anywhere.
func TestIngressAuthRequired(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:8080", "':8080'", "'[::]:8080'", "10.1.2.3:8080", "ingress.internal:8080"} {
		_, err := Parse([]byte(ingressBase+"ingress: {listen: "+listen+"}\n"), nil)
		if err == nil || !strings.Contains(err.Error(), "ingress.auth: required when ingress.listen") {
			t.Errorf("listen %s without auth: got %v, want an error naming ingress.auth", listen, err)
		}
		c, err := Parse([]byte(ingressBase+"ingress: {listen: "+listen+", auth: none}\n"), nil)
		if err != nil || !c.Ingress.Auth.None || !c.Ingress.Open() {
			t.Errorf("listen %s with auth: none: %v", listen, err)
		}
	}
	for _, listen := range []string{"127.0.0.1:8080", "127.0.0.2:0", "localhost:8080", "'[::1]:8080'"} {
		c, err := Parse([]byte(ingressBase+"ingress: {listen: "+listen+"}\n"), nil)
		if err != nil || c.Ingress.Auth != nil || !c.Ingress.Open() {
			t.Errorf("loopback %s without auth: %v", listen, err)
		}
	}
	c, err := Parse([]byte(ingressBase+"ingress: {listen: \"off\"}\n"), nil)
	if err != nil || c.Ingress.Auth != nil {
		t.Errorf("listen off without auth: %v", err)
	}
}

// TestIngressAuthConfig: the keys of auth, tls and rateLimit take their
// defaults, and each wrong value is named by its key.
func TestIngressAuthConfig(t *testing.T) {
	const ok = `ingress:
  listen: 0.0.0.0:8443
  auth:
    tokensFile: /etc/projector/tokens
    jwt: {jwksURL: "https://idp.example/jwks.json", issuer: "https://idp.example/", audience: projector}
    mtls: {tenantFrom: san-uri, uriPrefix: "spiffe://example.org/tenant/"}
  tls: {certFile: c.pem, keyFile: k.pem, clientCAFile: ca.pem}
  rateLimit: {requests: 50}
`
	c, err := Parse([]byte(ingressBase+ok), nil)
	if err != nil {
		t.Fatal(err)
	}
	in := c.Ingress
	j := in.Auth.JWT
	if in.Open() || j.TenantClaim != "tenant_id" || j.Leeway.Std() != 30*time.Second || j.JWKSRefresh.Std() != 10*time.Minute ||
		in.ReloadInterval.Std() != 5*time.Second || in.RateLimit.Per.Std() != time.Second || in.RateLimit.Burst != 50 {
		t.Fatalf("defaults: %+v %+v %+v", in, j, in.RateLimit)
	}
	for _, tc := range []struct{ yaml, key string }{
		{"ingress: {listen: 0.0.0.0:1, auth: {}}", "ingress.auth: set at least one"},
		{"ingress: {listen: 0.0.0.0:1, auth: nobody}", "ingress.auth: expected a mapping"},
		{"ingress: {listen: 0.0.0.0:1, auth: {token: x}}", "ingress.auth.token: unknown key"},
		{"ingress: {listen: 0.0.0.0:1, auth: {jwt: {issuer: i, audience: a}}}", "ingress.auth.jwt.jwksFile"},
		{"ingress: {listen: 0.0.0.0:1, auth: {jwt: {jwksFile: f, jwksURL: 'https://x/', issuer: i, audience: a}}}", "ingress.auth.jwt.jwksURL: give"},
		{"ingress: {listen: 0.0.0.0:1, auth: {jwt: {jwksURL: 'http://idp.example/k', issuer: i, audience: a}}}", "ingress.auth.jwt.jwksURL: must be https"},
		{"ingress: {listen: 0.0.0.0:1, auth: {jwt: {jwksFile: f, audience: a}}}", "ingress.auth.jwt.issuer"},
		{"ingress: {listen: 0.0.0.0:1, auth: {jwt: {jwksFile: f, issuer: i}}}", "ingress.auth.jwt.audience"},
		{"ingress: {listen: 0.0.0.0:1, auth: {jwt: {jwksFile: f, issuer: i, audience: a, leeway: 6m}}}", "ingress.auth.jwt.leeway"},
		{"ingress: {listen: 0.0.0.0:1, auth: {jwt: {jwksFile: f, issuer: i, audience: a, tenantClaim: /a~2}}}", "ingress.auth.jwt.tenantClaim"},
		{"ingress: {listen: 0.0.0.0:1, auth: {jwt: {jwksFile: f, issuer: i, audience: a, jwksRefresh: 1s}}}", "ingress.auth.jwt.jwksRefresh"},
		{"ingress: {listen: 0.0.0.0:1, auth: {mtls: {tenantFrom: cn}}}", "ingress.tls.clientCAFile: required with ingress.auth.mtls"},
		{"ingress: {listen: 0.0.0.0:1, auth: {mtls: {tenantFrom: subject}}, tls: {certFile: c, keyFile: k, clientCAFile: ca}}", "ingress.auth.mtls.tenantFrom"},
		{"ingress: {listen: 0.0.0.0:1, auth: {mtls: {tenantFrom: san-uri}}, tls: {certFile: c, keyFile: k, clientCAFile: ca}}", "ingress.auth.mtls.uriPrefix"},
		{"ingress: {listen: 0.0.0.0:1, auth: none, tls: {certFile: c, keyFile: k, clientCAFile: ca}}", "ingress.tls.clientCAFile: client certificates authenticate only"},
		{"ingress: {listen: 0.0.0.0:1, auth: none, tls: {certFile: c}}", "ingress.tls.keyFile"},
		{"ingress: {listen: 127.0.0.1:1, rateLimit: {burst: 3}}", "ingress.rateLimit.requests"},
		{"ingress: {listen: 127.0.0.1:1, rateLimit: {requests: 3, per: -1s}}", "ingress.rateLimit.per"},
		{"ingress: {listen: 127.0.0.1:1, reloadInterval: -1s}", "ingress.reloadInterval"},
	} {
		_, err := Parse([]byte(ingressBase+tc.yaml+"\n"), nil)
		if err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s: got %v, want an error naming %s", tc.yaml, err, tc.key)
		}
	}
}
