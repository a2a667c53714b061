package ingressauth

// JWT access tokens: parsed and verified by golang-jwt, keys by keyfunc over
// the keySet; a verified token is remembered by its SHA-256 until it
// expires, so that a client reusing its token costs a hash, not a
// signature check, per request.

import (
	"context"
	"crypto/sha256"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"

	"github.com/projector-dev/projector/internal/app/config"
)

// algorithms are the only signing algorithms accepted: none, HS* (a shared
// secret the identity provider would have to hand out) and the rest are
// refused before any key is looked up.
var algorithms = []string{"RS256", "ES256"}

// maxCachedTokens bounds the verified-token cache.
const maxCachedTokens = 10_000

type jwtVerifier struct {
	parser *jwt.Parser
	keys   *keySet
	kf     keyfunc.Keyfunc
	claim  []string // the tenant claim's path: one name, or a pointer's names
	leeway time.Duration
	now    func() time.Time

	mu    sync.Mutex
	cache map[[sha256.Size]byte]cachedToken
}

type cachedToken struct {
	tenant string
	until  time.Time // exp + leeway: when the parser would refuse it
	gen    uint64    // the keySet's generation it was verified against
}

func newJWTVerifier(c *config.IngressJWT, keys *keySet, now func() time.Time) (*jwtVerifier, error) {
	kf, err := keyfunc.New(keyfunc.Options{
		Storage:      refreshingStorage{MemoryJWKSet: keys.store, ks: keys},
		UseWhitelist: []jwkset.USE{jwkset.UseSig, ""}, // never a key meant for encryption
	})
	if err != nil {
		return nil, err
	}
	return &jwtVerifier{
		parser: jwt.NewParser(jwt.WithValidMethods(algorithms), jwt.WithIssuer(c.Issuer), jwt.WithAudience(c.Audience),
			jwt.WithLeeway(c.Leeway.Std()), jwt.WithIssuedAt(), jwt.WithExpirationRequired(), jwt.WithTimeFunc(now),
			jwt.WithStrictDecoding()),
		keys: keys, kf: kf, claim: claimPath(c.TenantClaim), leeway: c.Leeway.Std(), now: now,
		cache: map[[sha256.Size]byte]cachedToken{},
	}, nil
}

// claimPath splits a tenant claim: a JSON pointer ("/org/id", RFC 6901
// escapes) or a single claim name (which may contain dots or slashes, as
// URL-named claims do).
func claimPath(c string) []string {
	if !strings.HasPrefix(c, "/") {
		return []string{c}
	}
	parts := strings.Split(c[1:], "/")
	for i, p := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
	}
	return parts
}

// looksLikeJWT reports whether a bearer token has a JWS compact form's
// three parts.
func looksLikeJWT(token string) bool { return strings.Count(token, ".") == 2 }

// verify returns the tenant of a valid token, or the reason it is refused.
func (v *jwtVerifier) verify(ctx context.Context, token string) (string, *refusal) {
	if !v.keys.loaded.Load() {
		return "", refuse(reasonKeysUnavailable, "the token's keys (JWKS) are not loaded yet; retry shortly")
	}
	h := sha256.Sum256([]byte(token))
	now := v.now()
	gen := v.keys.gen.Load()
	v.mu.Lock()
	c, ok := v.cache[h]
	v.mu.Unlock()
	if ok && c.gen == gen && now.Before(c.until) {
		return c.tenant, nil
	}
	claims := jwt.MapClaims{}
	tok, err := v.parser.ParseWithClaims(token, claims, v.kf.KeyfuncCtx(ctx))
	if err != nil {
		return "", classify(tok, err)
	}
	tenant, ok := claimString(claims, v.claim)
	if !ok {
		return "", refuse(reasonNoTenant, "the token carries no tenant (1 to 255 printable ASCII characters) in claim "+strconv.Quote(strings.Join(v.claim, "/")))
	}
	exp, _ := claims.GetExpirationTime() // required: the parser checked it
	v.remember(h, cachedToken{tenant: tenant, until: exp.Add(v.leeway), gen: gen}, now)
	return tenant, nil
}

// remember caches a verified token. A full cache drops its expired entries,
// or, if none has, starts over: the cache only saves work.
func (v *jwtVerifier) remember(h [sha256.Size]byte, c cachedToken, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.cache) >= maxCachedTokens {
		for k, e := range v.cache {
			if !now.Before(e.until) || e.gen != c.gen {
				delete(v.cache, k)
			}
		}
		if len(v.cache) >= maxCachedTokens {
			clear(v.cache)
		}
	}
	v.cache[h] = c
}

// claimString finds the tenant claim along path.
func claimString(claims jwt.MapClaims, path []string) (string, bool) {
	var cur any = map[string]any(claims)
	for _, name := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false
		}
		if cur, ok = m[name]; !ok {
			return "", false
		}
	}
	s, ok := cur.(string)
	return s, ok && ValidTenant(s)
}

// classify names why golang-jwt refused a token. When several claims are
// wrong, the first of issuer, audience, expiry and not-yet-valid is named.
func classify(tok *jwt.Token, err error) *refusal {
	switch {
	case errors.Is(err, jwt.ErrTokenMalformed):
		return refuse(reasonMalformed, "the token is not a well-formed JWT")
	case badAlgorithm(tok):
		return refuse(reasonBadAlgorithm, "the token is not signed with RS256 or ES256")
	case errors.Is(err, jwkset.ErrKeyNotFound):
		return refuse(reasonUnknownKey, "the token's key id (kid) is not in the key set")
	case errors.Is(err, jwt.ErrTokenSignatureInvalid), errors.Is(err, jwt.ErrTokenUnverifiable):
		return refuse(reasonBadSignature, "the token's signature does not verify with the key set")
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return refuse(reasonBadIssuer, "the token's issuer (iss) is not accepted here")
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return refuse(reasonBadAudience, "the token's audience (aud) is not accepted here")
	case errors.Is(err, jwt.ErrTokenExpired):
		return refuse(reasonExpired, "the token has expired")
	case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
		return refuse(reasonNotYetValid, "the token is not valid yet (nbf or iat is in the future)")
	case errors.Is(err, jwt.ErrTokenRequiredClaimMissing):
		return refuse(reasonMalformed, "the token lacks a required claim (exp, iss or aud)")
	}
	return refuse(reasonMalformed, "the token is not a valid JWT")
}

// badAlgorithm reports whether the token's header names an algorithm
// outside algorithms (golang-jwt reports it as a signature error, or as
// unverifiable for an algorithm it does not know).
func badAlgorithm(tok *jwt.Token) bool {
	if tok == nil {
		return false
	}
	alg, _ := tok.Header["alg"].(string)
	for _, a := range algorithms {
		if alg == a {
			return false
		}
	}
	return true
}
