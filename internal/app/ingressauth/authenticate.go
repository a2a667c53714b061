package ingressauth

// The middleware: who is asking, for which tenant.

import (
	"context"
	"net/http"
	"strconv"
	"strings"
)

// HeaderTenant is the header a client may name its tenant in; with a
// credential it must name the credential's.
const HeaderTenant = "X-Tenant-ID"

// ProblemFunc writes an RFC 9457 problem answer (the ingress's own writer,
// so that every answer of the ingress has one shape).
type ProblemFunc func(w http.ResponseWriter, status int, field, detail string)

type tenantKey struct{}

// Tenant returns the tenant of an authenticated request's credential. ok is
// false when the ingress does not authenticate: then the request names its
// tenant itself.
func Tenant(ctx context.Context) (tenant string, ok bool) {
	tenant, ok = ctx.Value(tenantKey{}).(string)
	return tenant, ok
}

// refusal is why a request is not let in.
type refusal struct {
	reason string
	detail string
}

func refuse(reason, detail string) *refusal { return &refusal{reason, detail} }

// status is the answer's code: 403 for another tenant, 503 while the keys
// are not loaded, 401 otherwise.
func (f *refusal) status() int {
	switch f.reason {
	case reasonTenantMismatch:
		return http.StatusForbidden
	case reasonKeysUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusUnauthorized
}

// challenge is the WWW-Authenticate value of a 401 (RFC 6750 section 3):
// no error code when no token was presented, invalid_request for a
// malformed Authorization header, invalid_token for any other token.
func (f *refusal) challenge() string {
	c := `Bearer realm="projector"`
	switch f.reason {
	case reasonMissing, reasonClientCert: // no token was presented
		return c
	case reasonMalformed:
		c += `, error="invalid_request"`
	default:
		c += `, error="invalid_token"`
	}
	// The details are fixed texts without quotes or backslashes, but one
	// may name a claim: quote it as a header's quoted-string needs.
	return c + `, error_description=` + strconv.Quote(strings.ReplaceAll(f.detail, `"`, `'`))
}

// field names what the problem is about.
func (f *refusal) field() string {
	switch f.reason {
	case reasonTenantMismatch:
		return HeaderTenant
	case reasonClientCert:
		return "client certificate"
	}
	return "Authorization"
}

// The details of refusals avoid <, > and &, which encoding/json escapes.

// Wrap authenticates every request before next sees it and puts the
// credential's tenant into its context (Tenant). Refusals are answered with
// problem; an open Gate (no authentication) passes every request through.
func (g *Gate) Wrap(next http.Handler, problem ProblemFunc) http.Handler {
	if g == nil || g.open {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, f := g.authenticate(r)
		if f == nil {
			f = checkTenant(r, tenant)
		}
		if f != nil {
			g.metrics.failures.WithLabelValues(f.reason).Inc()
			switch f.status() {
			case http.StatusUnauthorized:
				w.Header().Set("WWW-Authenticate", f.challenge())
			case http.StatusServiceUnavailable:
				w.Header().Set("Retry-After", "1")
			}
			problem(w, f.status(), f.field(), f.detail)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, tenant)))
	})
}

// authenticate finds the request's credential and its tenant. An
// Authorization header decides when present: a bad token is refused even
// when a client certificate would do, never passed over.
func (g *Gate) authenticate(r *http.Request) (string, *refusal) {
	authz := r.Header.Values("Authorization")
	switch {
	case len(authz) > 1:
		return "", refuse(reasonMalformed, "give one Authorization header: Bearer and the token")
	case len(authz) == 1:
		token, ok := bearer(authz[0])
		if !ok {
			return "", refuse(reasonMalformed, "the Authorization header must be Bearer and the token")
		}
		return g.token(r.Context(), token)
	case g.mtls != nil && r.TLS != nil && len(r.TLS.VerifiedChains) > 0:
		return certTenant(g.mtls, r.TLS.VerifiedChains[0][0])
	}
	return "", refuse(reasonMissing, g.wanted())
}

// wanted says which credentials this ingress accepts.
func (g *Gate) wanted() string {
	var ways []string
	if g.tokens.Load() != nil || g.jwt != nil {
		ways = append(ways, "an Authorization header with a Bearer token")
	}
	if g.mtls != nil {
		ways = append(ways, "a client certificate (TLS)")
	}
	return "a credential is required: " + strings.Join(ways, " or ")
}

// bearer extracts the token of an RFC 6750 "Bearer <token68>" value.
func bearer(v string) (string, bool) {
	scheme, token, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimLeft(token, " ")
	return token, token68(token)
}

// token68 checks RFC 9110's token68 syntax.
func token68(s string) bool {
	body := strings.TrimRight(s, "=")
	if body == "" {
		return false
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/':
		default:
			return false
		}
	}
	return true
}

// token authenticates a bearer token: a credential of the tokens file,
// else a JWT.
func (g *Gate) token(ctx context.Context, token string) (string, *refusal) {
	if ts := g.tokens.Load(); ts != nil {
		if tenant, ok := ts.lookup(token); ok {
			return tenant, nil
		}
	}
	if g.jwt != nil && looksLikeJWT(token) {
		return g.jwt.verify(ctx, token)
	}
	if g.tokens.Load() == nil && g.jwt == nil {
		return "", refuse(reasonUnknownToken, "bearer tokens are not accepted here: present a client certificate")
	}
	return "", refuse(reasonUnknownToken, "the bearer token is not known")
}

// checkTenant refuses a request that names a tenant other than its
// credential's, in X-Tenant-ID or in ?tenant= (the receipts' Location).
func checkTenant(r *http.Request, tenant string) *refusal {
	for _, t := range r.Header.Values(HeaderTenant) {
		if t != tenant {
			return refuse(reasonTenantMismatch, "the "+HeaderTenant+" header names another tenant than the credential's; omit it or name the credential's")
		}
	}
	for _, t := range r.URL.Query()["tenant"] {
		if t != tenant {
			return refuse(reasonTenantMismatch, "?tenant= names another tenant than the credential's; omit it or name the credential's")
		}
	}
	return nil
}
