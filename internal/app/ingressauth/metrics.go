package ingressauth

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Why a request was refused: the reason label of
// projector_ingress_auth_failures_total and the detail of its answer.
const (
	reasonMissing         = "missing"          // no credential at all
	reasonMalformed       = "malformed"        // Authorization not "Bearer <token>", or a JWT that does not parse
	reasonUnknownToken    = "unknown_token"    // a bearer token in no tokens file (and not a JWT)
	reasonBadAlgorithm    = "bad_algorithm"    // a JWT not signed RS256 or ES256 (none, HS256, …)
	reasonUnknownKey      = "unknown_key"      // a JWT whose kid is in no JWKS, also after a refresh
	reasonBadSignature    = "bad_signature"    // a JWT whose signature does not verify
	reasonBadIssuer       = "bad_issuer"       // iss is not ingress.auth.jwt.issuer
	reasonBadAudience     = "bad_audience"     // aud does not hold ingress.auth.jwt.audience
	reasonExpired         = "expired"          // exp passed (beyond the leeway)
	reasonNotYetValid     = "not_yet_valid"    // nbf or iat in the future (beyond the leeway)
	reasonNoTenant        = "no_tenant"        // a valid JWT without a usable tenant claim
	reasonClientCert      = "client_cert"      // a verified client certificate that names no tenant
	reasonTenantMismatch  = "tenant_mismatch"  // X-Tenant-ID or ?tenant= names another tenant (403)
	reasonKeysUnavailable = "keys_unavailable" // the JWKS URL has not been read yet (503)
)

var reasons = []string{reasonMissing, reasonMalformed, reasonUnknownToken, reasonBadAlgorithm, reasonUnknownKey,
	reasonBadSignature, reasonBadIssuer, reasonBadAudience, reasonExpired, reasonNotYetValid, reasonNoTenant,
	reasonClientCert, reasonTenantMismatch, reasonKeysUnavailable}

// The files a Gate reloads: the file label of projector_ingress_reloads_total.
const (
	fileTokens = "tokens"
	fileJWKS   = "jwks"
	fileTLS    = "tls"
)

type gateMetrics struct {
	failures *prometheus.CounterVec
	reloads  *prometheus.CounterVec
}

func newGateMetrics(files []string) gateMetrics {
	m := gateMetrics{
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "projector_ingress_auth_failures_total",
			Help: "Ingress requests refused by authentication, by reason (never the credential).",
		}, []string{"reason"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "projector_ingress_reloads_total",
			Help: "Reloads of the ingress's credential and certificate files (and JWKS fetches), by file and result; an error keeps the previous version.",
		}, []string{"file", "result"}),
	}
	for _, r := range reasons {
		m.failures.WithLabelValues(r)
	}
	for _, f := range files {
		m.reloads.WithLabelValues(f, "ok")
		m.reloads.WithLabelValues(f, "error")
	}
	return m
}

// Register adds the Gate's metrics to reg.
func (g *Gate) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{g.metrics.failures, g.metrics.reloads} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
