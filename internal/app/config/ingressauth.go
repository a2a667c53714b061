package config

// The ingress's door lock: authentication, TLS and the per-tenant rate
// limit (docs/ingress.md#authentication, decision 013).

import (
	"net"
	"net/url"
	"strings"
	"time"
)

// Ingress security defaults.
const (
	DefaultIngressReloadInterval = 5 * time.Second
	DefaultJWTLeeway             = 30 * time.Second
	DefaultJWKSRefresh           = 10 * time.Minute
	DefaultTenantClaim           = "tenant_id"
	MaxJWTLeeway                 = 5 * time.Minute

	// AuthNone as ingress.auth serves without authentication, stated.
	AuthNone = "none"
)

// Client-certificate tenant sources (ingress.auth.mtls.tenantFrom).
const (
	TenantFromSANURI = "san-uri"
	TenantFromCN     = "cn"
)

// IngressAuth says who may use the ingress. Required when ingress.listen is
// not a loopback address. The scalar `auth: none` sets None.
type IngressAuth struct {
	// None is `auth: none`: no authentication, on purpose.
	None bool `yaml:"-"`
	// TokensFile holds bearer credentials, one per line: the SHA-256 hex of
	// the token and the tenant it acts for. Reloaded on change and SIGHUP.
	TokensFile string `yaml:"tokensFile"`
	// JWT accepts OIDC access tokens signed by a key of a JWKS.
	JWT *IngressJWT `yaml:"jwt"`
	// MTLS accepts a verified client certificate as the credential
	// (needs ingress.tls.clientCAFile).
	MTLS *IngressMTLS `yaml:"mtls"`
}

// IngressJWT configures JWT access tokens (RS256 or ES256).
type IngressJWT struct {
	// JWKSFile or JWKSURL (exactly one) holds the verification keys.
	JWKSFile string `yaml:"jwksFile"`
	JWKSURL  string `yaml:"jwksURL"`
	// JWKSRefresh is how often JWKSURL is fetched again; default 10m. A
	// token naming an unknown key fetches it at once (at most every 30s).
	JWKSRefresh Duration `yaml:"jwksRefresh"`
	// Issuer and Audience must match the token's iss and aud; required.
	Issuer   string `yaml:"issuer"`
	Audience string `yaml:"audience"`
	// TenantClaim names the claim that holds the tenant: a top-level claim
	// name, or an RFC 6901 JSON pointer ("/org/id") for a nested one.
	// Default tenant_id.
	TenantClaim string `yaml:"tenantClaim"`
	// Leeway is the clock skew allowed on exp, nbf and iat; default 30s,
	// at most 5m.
	Leeway Duration `yaml:"leeway"`
}

// IngressMTLS configures client certificates as credentials.
type IngressMTLS struct {
	// TenantFrom is san-uri (the URI SAN that starts with URIPrefix, the
	// rest being the tenant) or cn (the subject's common name).
	TenantFrom string `yaml:"tenantFrom"`
	// URIPrefix, for san-uri, e.g. spiffe://example.org/tenant/.
	URIPrefix string `yaml:"uriPrefix"`
}

// IngressTLS serves the ingress over TLS. The files are reloaded on change.
type IngressTLS struct {
	CertFile string `yaml:"certFile"`
	KeyFile  string `yaml:"keyFile"`
	// ClientCAFile verifies client certificates (mutual TLS); only with
	// ingress.auth.mtls.
	ClientCAFile string `yaml:"clientCAFile"`
}

// IngressRateLimit is a token bucket per tenant: Requests per Per, with
// bursts of up to Burst.
type IngressRateLimit struct {
	Requests int      `yaml:"requests"` // required, at least 1
	Per      Duration `yaml:"per"`      // default 1s
	Burst    int      `yaml:"burst"`    // default Requests
}

// Open reports whether the ingress serves without authentication, stated
// (auth: none) or not (absent).
func (in *Ingress) Open() bool { return in.Auth == nil || in.Auth.None }

// IsLoopback reports whether a listen address binds loopback only:
// localhost or a loopback IP. An empty host (all interfaces) or any other
// name is not.
func IsLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (in *Ingress) applySecurityDefaults() {
	if in.ReloadInterval == 0 {
		in.ReloadInterval = Duration(DefaultIngressReloadInterval)
	}
	if a := in.Auth; a != nil && a.JWT != nil {
		j := a.JWT
		if j.JWKSRefresh == 0 {
			j.JWKSRefresh = Duration(DefaultJWKSRefresh)
		}
		if j.TenantClaim == "" {
			j.TenantClaim = DefaultTenantClaim
		}
		if j.Leeway == 0 {
			j.Leeway = Duration(DefaultJWTLeeway)
		}
	}
	if r := in.RateLimit; r != nil {
		if r.Per == 0 {
			r.Per = Duration(time.Second)
		}
		if r.Burst == 0 {
			r.Burst = r.Requests
		}
	}
}

// validateIngressSecurity checks auth, tls, rateLimit and reloadInterval.
func (in *Ingress) validateIngressSecurity(l *errorList) {
	if in.Enabled() && in.Auth == nil && !IsLoopback(in.Listen) {
		l.add("ingress.auth", "required when ingress.listen (%s) is not a loopback address: set tokensFile, jwt or mtls "+
			"(docs/ingress.md#authentication), or write auth: %s to serve anyone who can reach it", in.Listen, AuthNone)
	}
	if a := in.Auth; a != nil && !a.None {
		if a.TokensFile == "" && a.JWT == nil && a.MTLS == nil {
			l.add("ingress.auth", "set at least one of tokensFile, jwt or mtls, or write auth: %s", AuthNone)
		}
		if a.JWT != nil {
			a.JWT.validate(l)
		}
		if a.MTLS != nil {
			in.validateMTLS(l)
		}
	}
	if t := in.TLS; t != nil {
		if t.CertFile == "" {
			l.add("ingress.tls.certFile", "required in ingress.tls")
		}
		if t.KeyFile == "" {
			l.add("ingress.tls.keyFile", "required in ingress.tls")
		}
		if t.ClientCAFile != "" && (in.Auth == nil || in.Auth.MTLS == nil) {
			l.add("ingress.tls.clientCAFile", "client certificates authenticate only with ingress.auth.mtls: configure it, or remove clientCAFile")
		}
	}
	if r := in.RateLimit; r != nil {
		between(l, "ingress.rateLimit.requests", r.Requests, 1, 1_000_000)
		positive(l, "ingress.rateLimit.per", r.Per)
		between(l, "ingress.rateLimit.burst", r.Burst, 1, 1_000_000)
	}
	positive(l, "ingress.reloadInterval", in.ReloadInterval)
}

func (j *IngressJWT) validate(l *errorList) {
	const key = "ingress.auth.jwt"
	switch {
	case j.JWKSFile == "" && j.JWKSURL == "":
		l.add(key+".jwksFile", "jwksFile or jwksURL is required")
	case j.JWKSFile != "" && j.JWKSURL != "":
		l.add(key+".jwksURL", "give jwksFile or jwksURL, not both")
	case j.JWKSURL != "":
		u, err := url.Parse(j.JWKSURL)
		switch {
		case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
			l.add(key+".jwksURL", "must be an absolute https URL, got %q", j.JWKSURL)
		case u.Scheme == "http" && !IsLoopback(net.JoinHostPort(u.Hostname(), "0")):
			l.add(key+".jwksURL", "must be https (plain http only on a loopback address), got %q", j.JWKSURL)
		}
	}
	if j.Issuer == "" {
		l.add(key+".issuer", "required: the iss every accepted token carries")
	}
	if j.Audience == "" {
		l.add(key+".audience", "required: the aud every accepted token carries")
	}
	if msg := checkClaimPointer(j.TenantClaim); msg != "" {
		l.add(key+".tenantClaim", "%s", msg)
	}
	if j.Leeway < 0 || j.Leeway > Duration(MaxJWTLeeway) {
		l.add(key+".leeway", "must be between 0 and %s, got %s", MaxJWTLeeway, j.Leeway)
	}
	if j.JWKSRefresh < Duration(10*time.Second) {
		l.add(key+".jwksRefresh", "must be at least 10s, got %s", j.JWKSRefresh)
	}
}

// checkClaimPointer checks a tenant claim: a name, or a JSON pointer whose
// "~" escapes are ~0 and ~1 (RFC 6901).
func checkClaimPointer(c string) string {
	if !strings.HasPrefix(c, "/") {
		return ""
	}
	for i := 0; i < len(c); i++ {
		if c[i] == '~' && (i+1 == len(c) || (c[i+1] != '0' && c[i+1] != '1')) {
			return "a JSON pointer may only escape ~0 (~) and ~1 (/), got " + c
		}
	}
	if c == "/" || strings.Contains(c, "//") || strings.HasSuffix(c, "/") {
		return "a JSON pointer's claim names must not be empty, got " + c
	}
	return ""
}

func (in *Ingress) validateMTLS(l *errorList) {
	m := in.Auth.MTLS
	oneOf(l, "ingress.auth.mtls.tenantFrom", m.TenantFrom, TenantFromSANURI, TenantFromCN)
	switch {
	case m.TenantFrom == TenantFromSANURI && m.URIPrefix == "":
		l.add("ingress.auth.mtls.uriPrefix", "required with tenantFrom: %s, e.g. spiffe://example.org/tenant/", TenantFromSANURI)
	case m.TenantFrom == TenantFromCN && m.URIPrefix != "":
		l.add("ingress.auth.mtls.uriPrefix", "only with tenantFrom: %s", TenantFromSANURI)
	}
	if in.TLS == nil || in.TLS.ClientCAFile == "" {
		l.add("ingress.tls.clientCAFile", "required with ingress.auth.mtls: the CA that signs client certificates")
	}
}
