package ingressauth

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"

	"github.com/projector-dev/projector/internal/app/config"
)

// BenchmarkTokenLookup: the constant-time scan, per tokens-file size.
func BenchmarkTokenLookup(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		var file strings.Builder
		for i := range n {
			file.WriteString(hashLine(fmt.Sprintf("token-%d", i), "t") + "\n")
		}
		ts, err := parseTokens([]byte(file.String()))
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("lines=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, ok := ts.lookup("token-0"); !ok {
					b.Fatal("not found")
				}
			}
		})
	}
}

// BenchmarkJWTVerify: a token verified by signature (every request a new
// token) and remembered (a client reusing its token).
func BenchmarkJWTVerify(b *testing.B) {
	dir := b.TempDir()
	ec, _ := ecKey(b, "k-ec")
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		b.Fatal(err)
	}
	store := jwkset.NewMemoryStorage()
	for kid, pub := range map[string]any{"k-ec": &ec.PublicKey, "k-rsa": &rk.PublicKey} {
		alg := map[string]jwkset.ALG{"k-ec": jwkset.AlgES256, "k-rsa": jwkset.AlgRS256}[kid]
		jwk, err := jwkset.NewJWKFromKey(pub, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid, ALG: alg}})
		if err != nil {
			b.Fatal(err)
		}
		if err := store.KeyWrite(context.Background(), jwk); err != nil {
			b.Fatal(err)
		}
	}
	doc, err := store.JSONPublic(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	write(b, filepath.Join(dir, "jwks.json"), doc)
	g, err := New(&config.Ingress{Listen: "127.0.0.1:0", Auth: &config.IngressAuth{JWT: &config.IngressJWT{
		JWKSFile: filepath.Join(dir, "jwks.json"), Issuer: "iss", Audience: "aud", TenantClaim: "tenant_id",
		Leeway: config.Duration(30 * time.Second)}}}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	claims := func(i int) jwt.MapClaims {
		return jwt.MapClaims{"iss": "iss", "aud": "aud", "exp": time.Now().Add(time.Hour).Unix(), "tenant_id": "acme", "jti": i}
	}
	sign := func(method jwt.SigningMethod, kid string, key any, i int) string {
		tok := jwt.NewWithClaims(method, claims(i))
		tok.Header["kid"] = kid
		s, err := tok.SignedString(key)
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	for _, c := range []struct {
		name   string
		method jwt.SigningMethod
		kid    string
		key    any
	}{{"ES256", jwt.SigningMethodES256, "k-ec", ec}, {"RS256", jwt.SigningMethodRS256, "k-rsa", rk}} {
		toks := make([]string, 2000)
		for i := range toks {
			toks[i] = sign(c.method, c.kid, c.key, i)
		}
		b.Run(c.name+"/verified", func(b *testing.B) {
			i := 0
			for b.Loop() {
				clear(g.jwt.cache)
				if _, f := g.jwt.verify(context.Background(), toks[i%len(toks)]); f != nil {
					b.Fatal(f.detail)
				}
				i++
			}
		})
		b.Run(c.name+"/remembered", func(b *testing.B) {
			for b.Loop() {
				if _, f := g.jwt.verify(context.Background(), toks[0]); f != nil {
					b.Fatal(f.detail)
				}
			}
		})
	}
}
