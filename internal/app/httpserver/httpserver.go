// Package httpserver serves the operational endpoints of a worker
// (docs/contract.md#health-and-readiness, http.listen):
//
//   - /metrics: the Prometheus exposition of the given Gatherer;
//   - /healthz: 200 "ok" as long as the process serves HTTP (liveness);
//   - /readyz: 200 "ready" when ready() is true, else 503 with the reason it
//     gives (readiness: joined the groups and every assigned partition
//     restored; none assigned counts).
//
// Invariants: the server serves only between Run's start and its return; Run
// owns the listener and every goroutine it starts, and returns only after
// they are gone. Listen "off" or "" serves nothing.
package httpserver

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Off as the listen address disables the server (config.HTTPOff).
const Off = "off"

// ShutdownTimeout bounds how long Run waits for in-flight requests once its
// context is done.
const ShutdownTimeout = 5 * time.Second

// ReadyFunc reports readiness and, when not ready, why.
type ReadyFunc func() (ready bool, reason string)

// Options are a listener's TLS and limits; zero values take the
// operational endpoints' defaults (plain HTTP, ReadHeaderTimeout 10s,
// IdleTimeout 60s, Go's 1 MB header limit, no read or write timeout).
type Options struct {
	TLS               *tls.Config // serve TLS; it must provide the certificate
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	MaxHeaderBytes    int
}

// Server is the HTTP server of one worker.
type Server struct {
	listen  string
	key     string // the configuration key of listen, for errors
	handler http.Handler
	opts    Options

	mu     sync.Mutex
	addr   net.Addr
	up     chan struct{} // closed once listening (or Run failed to listen)
	upOnce sync.Once
}

// New returns a server for listen (host:port; port 0 picks a free port).
// gatherer is served on /metrics (nil: an empty registry); ready decides
// /readyz (nil: never ready).
func New(listen string, gatherer prometheus.Gatherer, ready ReadyFunc) *Server {
	if gatherer == nil {
		gatherer = prometheus.NewRegistry()
	}
	if ready == nil {
		ready = func() (bool, string) { return false, "starting" }
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		text(w, http.StatusOK, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, reason := ready()
		if ok {
			text(w, http.StatusOK, "ready\n")
			return
		}
		text(w, http.StatusServiceUnavailable, "not ready: "+reason+"\n")
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		text(w, http.StatusOK, "projector: /metrics /healthz /readyz\n")
	})
	return NewHandler(listen, "http.listen", mux, Options{})
}

// NewHandler returns a server of handler on listen (another listener, such
// as the ingress); key names listen's configuration key in errors.
func NewHandler(listen, key string, handler http.Handler, o Options) *Server {
	o.ReadHeaderTimeout = cmp.Or(o.ReadHeaderTimeout, 10*time.Second)
	o.IdleTimeout = cmp.Or(o.IdleTimeout, 60*time.Second)
	return &Server{listen: listen, key: key, handler: handler, opts: o, up: make(chan struct{})}
}

func text(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(body))
}

// Enabled reports whether Run serves anything.
func (s *Server) Enabled() bool { return s.listen != "" && s.listen != Off }

// Handler is the server's handler (tests, or mounting elsewhere).
func (s *Server) Handler() http.Handler { return s.handler }

// Addr returns the bound address once Run listens; nil before, and when the
// server is disabled or failed to listen.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Listening is closed once Run listens or has given up (then Addr is nil).
func (s *Server) Listening() <-chan struct{} { return s.up }

func (s *Server) markUp() { s.upOnce.Do(func() { close(s.up) }) }

// Run serves until ctx is done, then shuts down gracefully (in-flight requests
// get ShutdownTimeout) and returns nil. It returns an error naming the address
// if it cannot listen (the port is taken, say) or the server fails. With
// listen "off" or "" it returns nil at once. Call Run once.
func (s *Server) Run(ctx context.Context) error {
	if !s.Enabled() {
		s.markUp()
		return nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.listen)
	if err != nil {
		s.markUp()
		return fmt.Errorf("httpserver: cannot listen on %s (%s): %w", s.listen, s.key, err)
	}
	s.mu.Lock()
	s.addr = ln.Addr()
	s.mu.Unlock()
	s.markUp()

	srv := &http.Server{
		Handler:           s.handler,
		TLSConfig:         s.opts.TLS,
		ReadHeaderTimeout: s.opts.ReadHeaderTimeout,
		ReadTimeout:       s.opts.ReadTimeout,
		WriteTimeout:      s.opts.WriteTimeout,
		IdleTimeout:       s.opts.IdleTimeout,
		MaxHeaderBytes:    s.opts.MaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	served := make(chan error, 1)
	go func() {
		if s.opts.TLS != nil {
			served <- srv.ServeTLS(ln, "", "")
			return
		}
		served <- srv.Serve(ln)
	}()

	select {
	case err := <-served: // Serve closed the listener
		return fmt.Errorf("httpserver: serving on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	err = srv.Shutdown(sctx)
	if errors.Is(err, context.DeadlineExceeded) {
		err = srv.Close()
	}
	<-served // http.ErrServerClosed
	if err != nil {
		return fmt.Errorf("httpserver: shutdown of %s: %w", ln.Addr(), err)
	}
	return nil
}
