package ingressauth

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/projector-dev/projector/internal/app/config"
)

// Options are the wiring of a Gate that is not configuration.
type Options struct {
	Logger *slog.Logger
	// HTTPClient fetches a JWKS URL; default a client with a 10s timeout.
	HTTPClient *http.Client
	// Now is the clock of JWT validation and the rate limit; default
	// time.Now.
	Now func() time.Time
}

// Gate authenticates the ingress's requests, serves its TLS and charges
// its rate limit, as the ingress section configures.
type Gate struct {
	listen string
	auth   *config.IngressAuth // nil: absent
	open   bool                // no authentication (absent or none)

	tokens atomic.Pointer[tokenSet] // nil without tokensFile
	jwt    *jwtVerifier             // nil without jwt
	keys   *keySet                  // jwt's keys
	mtls   *config.IngressMTLS      // nil without mtls
	tls    *tlsFiles                // nil without ingress.tls
	limit  *limiter                 // nil without rateLimit

	watches     []*fileWatch
	interval    time.Duration // of the file polls
	jwksRefresh time.Duration // of a JWKS URL
	metrics     gateMetrics
	log         *slog.Logger
	sighup      chan struct{} // closed once Run listens for SIGHUP (tests)
}

// New builds the Gate of an ingress section and reads every file it names:
// an unreadable or invalid one is a *config.Error naming its key. Nothing
// is started and nothing is fetched: Run does that.
func New(in *config.Ingress, o Options) (*Gate, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	g := &Gate{listen: in.Listen, auth: in.Auth, open: in.Open(), interval: in.ReloadInterval.Std(),
		log: o.Logger, sighup: make(chan struct{})}
	if g.interval <= 0 {
		g.interval = config.DefaultIngressReloadInterval
	}
	var files []string
	if a := in.Auth; a != nil && !a.None {
		if a.TokensFile != "" {
			files = append(files, fileTokens)
			g.watch(fileTokens, "ingress.auth.tokensFile", []string{a.TokensFile}, g.loadTokens)
		}
		if a.JWT != nil {
			files = append(files, fileJWKS)
			if err := g.newJWT(a.JWT, o); err != nil {
				return nil, err
			}
		}
		g.mtls = a.MTLS
	}
	if t := in.TLS; t != nil {
		files = append(files, fileTLS)
		g.tls = &tlsFiles{clientCA: t.ClientCAFile != ""}
		paths := []string{t.CertFile, t.KeyFile}
		if t.ClientCAFile != "" {
			paths = append(paths, t.ClientCAFile)
		}
		g.watch(fileTLS, "ingress.tls.certFile", paths, g.tls.load)
	}
	if r := in.RateLimit; r != nil {
		g.limit = newLimiter(r.Requests, r.Per.Std(), r.Burst, o.Now)
	}
	g.metrics = newGateMetrics(files)
	for _, w := range g.watches {
		if err := w.first(); err != nil {
			return nil, err
		}
	}
	return g, nil
}

func (g *Gate) newJWT(c *config.IngressJWT, o Options) error {
	g.keys = newKeySet(c.JWKSURL, o.HTTPClient)
	var err error
	if g.jwt, err = newJWTVerifier(c, g.keys, o.Now); err != nil {
		return &config.Error{Key: "ingress.auth.jwt", Msg: err.Error()}
	}
	if c.JWKSFile != "" {
		g.watch(fileJWKS, "ingress.auth.jwt.jwksFile", []string{c.JWKSFile}, func(data [][]byte) (string, error) {
			n, err := g.keys.load(data[0])
			return fmt.Sprintf("%d keys", n), err
		})
	}
	g.jwksRefresh = c.JWKSRefresh.Std()
	return nil
}

func (g *Gate) loadTokens(data [][]byte) (string, error) {
	ts, err := parseTokens(data[0])
	if err != nil {
		return "", err
	}
	g.tokens.Store(ts)
	return fmt.Sprintf("%d credentials", len(ts.digests)), nil
}

// Ready reports whether the Gate can decide: false until a JWKS URL has
// been read once.
func (g *Gate) Ready() (bool, string) {
	if g != nil && g.keys != nil && !g.keys.loaded.Load() {
		return false, "JWKS not fetched yet (" + g.keys.url + ")"
	}
	return true, ""
}

// Charge takes one request of tenant from its rate limit. When the tenant
// is over it, ok is false and retryAfter says when a request would pass.
// Without ingress.rateLimit every request passes.
func (g *Gate) Charge(tenant string) (ok bool, retryAfter time.Duration) {
	if g == nil || g.limit == nil {
		return true, 0
	}
	return g.limit.charge(tenant)
}

// logPosture says once, at start, what the door lets in when that is
// worth an operator's attention.
func (g *Gate) logPosture() {
	loopback := config.IsLoopback(g.listen)
	switch {
	case g.auth == nil:
		g.log.Warn("ingress: no authentication (ingress.auth absent): any local process can write events for any tenant; configure ingress.auth before listening beyond loopback",
			"listen", g.listen)
	case g.open && !loopback:
		g.log.Warn("ingress: authentication off (auth: none) on a non-loopback address: anyone who reaches it can write events for any tenant and read its receipts",
			"listen", g.listen)
	case g.open:
		g.log.Info("ingress: authentication off (auth: none)", "listen", g.listen)
	case g.tls == nil && !loopback && (g.auth.TokensFile != "" || g.auth.JWT != nil):
		g.log.Warn("ingress: bearer credentials over plain HTTP on a non-loopback address: terminate TLS in front of it or set ingress.tls",
			"listen", g.listen)
	}
}

// Run reloads the files on change and SIGHUP and refreshes a JWKS URL,
// until ctx is done. It logs the Gate's posture first.
func (g *Gate) Run(ctx context.Context) error {
	g.logPosture()
	var wg sync.WaitGroup
	if g.keys != nil && g.keys.url != "" {
		g.keys.base.Store(&ctx)
		wg.Go(func() { g.refreshJWKS(ctx) })
	}
	g.reloadLoop(ctx)
	wg.Wait()
	return nil
}

// fileContent reads the files of one watch.
func fileContent(paths []string) ([][]byte, error) {
	out := make([][]byte, len(paths))
	for i, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}
