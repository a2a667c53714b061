package bench

// The credentials of `projector bench ingress --auth`: a tokens file and a
// JWKS file written for the run, and each client's bearer token and JWT.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
)

// The ingress's door locks the bench measures.
const (
	// AuthNone: auth: none, no credential.
	AuthNone = "none"
	// AuthToken: a bearer token per client from a tokens file (one line per
	// client), and a rate limit per tenant that never refuses, so that its
	// charge is measured too.
	AuthToken = "token"
	// AuthJWT: an ES256 JWT per client, verified against a JWKS file; each
	// client reuses its token, as a client reuses an access token until it
	// expires.
	AuthJWT = "jwt"
)

// benchTenants is how many tenants the clients are spread over.
const benchTenants = 16

type benchCredentials struct {
	tokensFile, jwksFile string
	tokens, jwts         []string // per client
}

func newBenchCredentials(dir string, clients int) (*benchCredentials, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c := &benchCredentials{tokensFile: filepath.Join(dir, "tokens"), jwksFile: filepath.Join(dir, "jwks.json")}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	var lines strings.Builder
	for i := range clients {
		tenant := fmt.Sprintf("tenant-%d", i%benchTenants)
		tok := rand.Text()
		d := sha256.Sum256([]byte(tok))
		fmt.Fprintf(&lines, "%s %s\n", hex.EncodeToString(d[:]), tenant)
		c.tokens = append(c.tokens, tok)
		t := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"iss": "bench", "aud": "bench", "tenant_id": tenant,
			"iat": time.Now().Unix(), "exp": time.Now().Add(24 * time.Hour).Unix()})
		t.Header["kid"] = "bench"
		s, err := t.SignedString(key)
		if err != nil {
			return nil, err
		}
		c.jwts = append(c.jwts, s)
	}
	if err := os.WriteFile(c.tokensFile, []byte(lines.String()), 0o600); err != nil {
		return nil, err
	}
	jwk, err := jwkset.NewJWKFromKey(&key.PublicKey, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: "bench", ALG: jwkset.AlgES256}})
	if err != nil {
		return nil, err
	}
	store := jwkset.NewMemoryStorage()
	if err := store.KeyWrite(context.Background(), jwk); err != nil {
		return nil, err
	}
	doc, err := store.JSONPublic(context.Background())
	if err != nil {
		return nil, err
	}
	return c, os.WriteFile(c.jwksFile, doc, 0o600)
}

// section is the ingress configuration of a mode (indented for the
// ingress mapping).
func (c *benchCredentials) section(mode string) string {
	switch mode {
	case AuthToken:
		return fmt.Sprintf("  auth: {tokensFile: %q}\n  rateLimit: {requests: 1000000, burst: 1000000}\n", c.tokensFile)
	case AuthJWT:
		return fmt.Sprintf("  auth:\n    jwt: {jwksFile: %q, issuer: bench, audience: bench}\n", c.jwksFile)
	}
	return "  auth: none\n"
}

// header is client i's Authorization in a mode.
func (c *benchCredentials) header(mode string) func(int) string {
	return func(i int) string {
		switch mode {
		case AuthToken:
			return "Bearer " + c.tokens[i]
		case AuthJWT:
			return "Bearer " + c.jwts[i]
		}
		return ""
	}
}
