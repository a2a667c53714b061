// Package ingress is the HTTP front door of the worker (docs/ingress.md,
// decisions 008 and 012): POST /v1/events takes one event envelope, or
// {"events":[…]}, under an Idempotency-Key (and X-Tenant-ID where tenancy
// is used), writes it as one claim to the claims topic and answers with the
// outcome the processor committed; GET /v1/receipts/{key} answers the same
// later.
//
// Invariants (the ingress's own; docs/ingress.md):
//
//   - One key, one request (docs/design.md#one-request-per-key): a request
//     is written only as a claim keyed by (tenant, key), never to the input
//     topic; the processor decides a key's claims in one partition, first
//     wins, and forwards only the winner's events. One event id per
//     (tenant, key, index), derived (receipt.EventID), never taken from the
//     client.
//   - 201 only for the request the key's claim receipt names (its random
//     id): at most one request per key, ever. Every other 2xx is a 200
//     replay, with the same bytes.
//   - Every 2xx body is built from committed receipts only (read
//     read_committed from the receipts topic, which the processor writes in
//     the transaction that processes the event): the answer is what was
//     committed, never a guess, and every instance gives the same bytes.
//   - A request whose key this instance sees decided (its claim receipt, or
//     for a key ingested before claims existed all its receipts) is never
//     written again: it is answered from them (200, or 409 when the shape
//     or a payload's RFC 8785 fingerprint differs from the decided one).
//     Until the receipts view has caught up with the end offsets taken at
//     start the server answers 503 (and is not ready), because a receipt it
//     has not read yet is not a missing receipt.
//   - Every accepted key's Location, /v1/receipts/{key}, reaches it: keys
//     the router would rewrite are refused (pollable).
//   - Every answer is safe to retry with the same key and body.
//   - With a Gate that authenticates, a request's tenant is its
//     credential's (ingressauth.Tenant), never X-Tenant-ID, ?tenant= or the
//     body's tenantId: a request cannot write or read another tenant's
//     keys (docs/design.md#tenant-from-credential). The rate limit is
//     charged only for a request about to write: a replay of a committed
//     key is answered without it.
//   - Run owns the listener, the producer and the receipts reader; on
//     shutdown the listener stops accepting, requests waiting for a receipt
//     are answered 202 at once, and Run returns after they are gone.
package ingress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/httpserver"
	"github.com/projector-dev/projector/internal/app/ingressauth"
	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/internal/core/eos"
)

// Config is what a Server needs (config.Ingress plus the wiring).
type Config struct {
	Listen         string        // host:port; port 0 picks one (Addr)
	Topic          string        // the input topic events are written to
	ReceiptsTopic  string        // the compacted receipts topic
	ClaimsTopic    string        // the claims topic: one record per request, decided by the processors
	Timeout        time.Duration // wait for the committed receipt, then 202; default config.DefaultIngressTimeout
	MaxBodyBytes   int64         // 413 above; default envelope.DefaultMaxBytes
	MaxBatch       int           // events per {"events":[…]}; default config.DefaultIngressMaxBatch
	RequireTenant  bool          // X-Tenant-ID mandatory
	MaxRecordBytes int           // kafka.maxRecordBytes: the largest event accepted; default envelope.DefaultMaxBytes
	Partitions     int32         // partitions of the receipts topic when it is created; default config.DefaultEmbeddedPartitions

	// Gate authenticates requests, serves TLS and charges the rate limit
	// (ingressauth.New); nil: none of them.
	Gate *ingressauth.Gate

	Brokers    []string
	ClientOpts []kgo.Opt
	Logger     *slog.Logger
	// Registerer takes the ingress metrics; nil: not registered.
	Registerer prometheus.Registerer
	// TracerProvider, when set, makes a span of every request (tracing.go);
	// nil: none, and the request's own trace context goes on the claim.
	TracerProvider trace.TracerProvider
}

func (c *Config) applyDefaults() {
	c.Timeout = config.OrDefault(c.Timeout, config.DefaultIngressTimeout)
	c.MaxBodyBytes = config.OrDefault(c.MaxBodyBytes, envelope.DefaultMaxBytes)
	c.MaxBatch = config.OrDefault(c.MaxBatch, config.DefaultIngressMaxBatch)
	c.MaxRecordBytes = config.OrDefault(c.MaxRecordBytes, envelope.DefaultMaxBytes)
	c.Partitions = config.OrDefault(c.Partitions, config.DefaultEmbeddedPartitions)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Server is one instance's ingress.
type Server struct {
	cfg     Config
	view    *view
	srv     *httpserver.Server
	metrics *metrics

	producer *kgo.Client
	tracer   trace.Tracer  // nil: no spans
	stop     chan struct{} // closed when Run's context is done: waiting requests answer 202

	mu       sync.Mutex
	inflight map[string]struct{} // tenant + "\n" + key of requests being handled here
}

// New validates cfg and builds the server; Run starts it.
func New(cfg Config) (*Server, error) {
	cfg.applyDefaults()
	if cfg.Topic == "" || cfg.ReceiptsTopic == "" || cfg.ClaimsTopic == "" || len(cfg.Brokers) == 0 {
		return nil, errors.New("ingress: Topic, ReceiptsTopic, ClaimsTopic and Brokers are required")
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, view: newView(cfg.Logger), metrics: m, stop: make(chan struct{}), inflight: map[string]struct{}{}}
	if cfg.TracerProvider != nil {
		s.tracer = cfg.TracerProvider.Tracer(tracerName)
	}
	s.producer, err = kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(cfg.Brokers...),
		kgo.ProducerBatchMaxBytes(int32(eos.MaxBatchBytes(cfg.MaxRecordBytes))),
		kgo.ProducerLinger(0)}, cfg.ClientOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("ingress: producer: %w", err)
	}
	s.srv = httpserver.NewHandler(cfg.Listen, "ingress.listen", s.Handler(), s.listenerOptions())
	return s, nil
}

// Handler serves /v1/events and /v1/receipts/{key}, every request
// authenticated first (Config.Gate). The metrics wrap both, so the mux's
// own answers (405 for a wrong method, 404 for another path) and the
// Gate's refusals are counted too.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/events", s.post)
	mux.HandleFunc("GET /v1/receipts/{key}", s.getReceipt)
	return s.metrics.wrap(s.traced(s.cfg.Gate.Wrap(mux, problemOf)))
}

// Ready reports whether the ingress answers requests: its receipts view has
// caught up with the receipts committed before it started, and its Gate
// has the keys it needs.
func (s *Server) Ready() (bool, string) {
	if ok, why := s.cfg.Gate.Ready(); !ok {
		return false, why
	}
	return s.view.ready()
}

// Addr is the bound address once listening (nil before).
func (s *Server) Addr() net.Addr { return s.srv.Addr() }

// Listening is closed once Run listens or has failed to.
func (s *Server) Listening() <-chan struct{} { return s.srv.Listening() }

// Run serves until ctx is done, then drains: new connections are refused,
// requests waiting for a receipt answer 202 at once, and Run returns once
// they have been answered. It returns an error if it cannot listen.
func (s *Server) Run(ctx context.Context) error {
	defer s.producer.Close()
	if err := s.checkAccess(ctx); err != nil {
		return err
	}
	stopAfter := context.AfterFunc(ctx, func() { close(s.stop) })
	defer stopAfter()
	// The reader outlives the listener: requests being drained may still
	// get their receipt.
	rctx, cancelReader := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	var readErr error
	wg.Go(func() {
		if err := s.ensureTopic(rctx); err != nil {
			return
		}
		readErr = s.view.run(rctx, s.clientOpts(), s.cfg.ReceiptsTopic)
	})
	if s.cfg.Gate != nil {
		wg.Go(func() { _ = s.cfg.Gate.Run(rctx) })
	}
	wg.Go(func() {
		select {
		case <-s.srv.Listening():
			if a := s.srv.Addr(); a != nil {
				s.cfg.Logger.Info("ingress listening", "addr", a.String(), "topic", s.cfg.Topic, "claims", s.cfg.ClaimsTopic, "receipts", s.cfg.ReceiptsTopic)
			}
		case <-rctx.Done():
		}
	})
	err := s.srv.Run(ctx)
	cancelReader()
	wg.Wait()
	return errors.Join(err, readErr)
}

func (s *Server) clientOpts() []kgo.Opt {
	return append([]kgo.Opt{kgo.SeedBrokers(s.cfg.Brokers...)}, s.cfg.ClientOpts...)
}

// ensureTopic creates the receipts and claims topics when missing (the
// processor does too, alike; whichever starts first), retrying until it
// succeeds or ctx is done. The claims topic takes the partition count of
// the topic the events go to; it must exist (the processor creates it on
// the embedded broker, an operator on a real cluster).
func (s *Server) ensureTopic(ctx context.Context) error {
	for {
		err := func() error {
			cl, err := kgo.NewClient(s.clientOpts()...)
			if err != nil {
				return err
			}
			defer cl.Close()
			tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			return eos.EnsureTopics(tctx, kadm.NewClient(cl), s.topicSpecs(), s.cfg.Partitions)
		}()
		if err == nil {
			return nil
		}
		s.view.setErr(err)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
