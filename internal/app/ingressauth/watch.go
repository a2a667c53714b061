package ingressauth

// Reloading: every file the Gate reads is read again every
// ingress.reloadInterval and on SIGHUP, and applied when its content
// changed. Polling the content (not inotify, not the modification time)
// sees every kind of replacement: an edit in place, a rename over it, and
// the symlink swap of a Kubernetes ConfigMap or Secret volume, on any file
// system, at the cost of reading a few small files every few seconds.

import (
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/projector-dev/projector/internal/app/config"
)

// fileWatch is one unit of reloading: files applied together (a
// certificate and its key).
type fileWatch struct {
	name  string // the file label of the reload metric
	key   string // the configuration key named in errors
	paths []string
	apply func([][]byte) (summary string, err error)
	last  [sha256.Size]byte // of the content last applied or refused
}

func (g *Gate) watch(name, key string, paths []string, apply func([][]byte) (string, error)) {
	g.watches = append(g.watches, &fileWatch{name: name, key: key, paths: paths, apply: apply})
}

func digest(data [][]byte) [sha256.Size]byte {
	h := sha256.New()
	for _, d := range data {
		var n [8]byte
		for i, l := 0, len(d); i < 8; i, l = i+1, l>>8 {
			n[i] = byte(l)
		}
		h.Write(n[:]) // lengths keep the files apart
		h.Write(d)
	}
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// first reads and applies the files at start; a failure is a
// configuration error naming the key.
func (w *fileWatch) first() error {
	data, err := fileContent(w.paths)
	if err == nil {
		_, err = w.apply(data)
	}
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			return ce
		}
		return &config.Error{Key: w.key, Msg: err.Error(), Err: err}
	}
	w.last = digest(data)
	return nil
}

// check applies the files if their content changed (or always, when
// forced). A failure logs an error and keeps what was applied before; the
// same broken content is not reported again until it changes.
func (g *Gate) check(w *fileWatch, force bool) {
	data, err := fileContent(w.paths)
	if err != nil {
		g.metrics.reloads.WithLabelValues(w.name, "error").Inc()
		g.log.Error("ingress: cannot read "+w.key+"; keeping the previous version", "err", err)
		return
	}
	d := digest(data)
	if d == w.last && !force {
		return
	}
	w.last = d
	summary, err := w.apply(data)
	if err != nil {
		g.metrics.reloads.WithLabelValues(w.name, "error").Inc()
		g.log.Error("ingress: "+w.key+" is invalid; keeping the previous version", "err", err)
		return
	}
	g.metrics.reloads.WithLabelValues(w.name, "ok").Inc()
	g.log.Info("ingress: reloaded "+w.key, "content", summary)
}

// reloadLoop is Run's body: it owns the SIGHUP subscription and the poll
// ticker.
func (g *Gate) reloadLoop(ctx context.Context) {
	jwksURL := g.keys != nil && g.keys.url != ""
	if len(g.watches) == 0 && !jwksURL {
		<-ctx.Done()
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	close(g.sighup)
	tick := time.NewTicker(g.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			for _, w := range g.watches {
				g.check(w, false)
			}
		case <-hup:
			g.log.Info("ingress: SIGHUP: reloading credentials and certificates")
			for _, w := range g.watches {
				g.check(w, true)
			}
			if jwksURL {
				g.fetchJWKS(ctx)
			}
		}
	}
}

// refreshJWKS fetches the JWKS URL at once, then every jwksRefresh, or
// sooner after a failure, until ctx is done.
func (g *Gate) refreshJWKS(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	backoff := time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if g.fetchJWKS(ctx) {
			backoff = time.Second
			t.Reset(g.jwksRefresh)
			continue
		}
		t.Reset(backoff)
		backoff = min(2*backoff, time.Minute, g.jwksRefresh)
	}
}

// fetchJWKS fetches the JWKS URL once and reports whether it succeeded.
func (g *Gate) fetchJWKS(ctx context.Context) bool {
	g.keys.fetchMu.Lock()
	n, err := g.keys.fetch(ctx)
	g.keys.fetchMu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			g.metrics.reloads.WithLabelValues(fileJWKS, "error").Inc()
			g.log.Error("ingress: fetching the JWKS failed; keeping the previous keys", "url", g.keys.url, "err", err)
		}
		return false
	}
	g.metrics.reloads.WithLabelValues(fileJWKS, "ok").Inc()
	g.log.Debug("ingress: fetched the JWKS", "url", g.keys.url, "keys", n)
	return true
}
