// Package wiring wires a loaded configuration into running parts: the embedded
// broker (when kafka.brokers is "embedded"), the Pebble state store and the
// processor. The CLI commands (run, demo, rebuild, bench) share it so that
// they build the worker the same way.
package wiring

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/app/broker"
	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/httpserver"
	"github.com/projector-dev/projector/internal/app/ingress"
	"github.com/projector-dev/projector/internal/app/metrics"
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/seam"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/projection"
	"github.com/projector-dev/projector/sideeffects"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// App is a wired worker. Close releases everything it started, in reverse order.
type App struct {
	Config    *config.Config
	Brokers   []string
	Embedded  *broker.Embedded // nil against a real cluster
	Store     *state.Store     // the processor's state (nil for role executor)
	Processor *processor.Processor
	// Executor runs the side effects (nil for role processor, in rebuild
	// mode, and when no side effects are configured).
	Executor      *sideeffects.Worker
	ExecutorStore *state.Store
	// Ingress is the HTTP front door (nil unless ingress.listen is set, in
	// live mode).
	Ingress *ingress.Server
	// HTTP serves the metrics and the health endpoints (http.listen); once
	// its Listening is closed, Addr is the bound address (a port of 0 picks
	// a free one).
	HTTP   *httpserver.Server
	Logger *slog.Logger
	// Registry holds every metric of this process; Metrics feeds it.
	Registry *prometheus.Registry
	Metrics  *metrics.Metrics
	admin    *kgo.Client
	sasl     *SASLWatch
	// tracer makes the spans (nil: tracing off); tracing is the provider
	// the wiring built and shuts down (tracing.go).
	tracer  trace.TracerProvider
	tracing *sdktrace.TracerProvider
}

// Role selects what a process runs.
type Role string

// Roles of `projector run --role`.
const (
	RoleAll       Role = "all"
	RoleProcessor Role = "processor"
	RoleExecutor  Role = "executor"
)

// Options adjust the wiring for a command.
type Options struct {
	Logger *slog.Logger
	Mode   processor.Mode
	Role   Role // default RoleAll
	// Hooks are passed to the processor (tests; internal/core/seam).
	Hooks *eos.Hooks
	// ExecutorHooks are passed to the executor's loop (tests).
	ExecutorHooks *eos.Hooks
	// TracerProvider, when set, makes the spans instead of the one
	// tracing.otlp configures (tests: an in-memory exporter); the caller
	// shuts it down.
	TracerProvider trace.TracerProvider
}

// ProcessorDir and ExecutorDir are the Pebble directories below state.dir.
func ProcessorDir(cfg *config.Config) string { return filepath.Join(cfg.State.Dir, "processor") }
func ExecutorDir(cfg *config.Config) string  { return filepath.Join(cfg.State.Dir, "executor") }

// Projections builds the configured projections with their declarative rules.
func Projections(cfg *config.Config) ([]*projection.Projection, error) {
	var out []*projection.Projection
	for i, pc := range cfg.Projections {
		rules := projection.Rules{}
		types := make([]string, 0, len(pc.Events))
		for t := range pc.Events {
			types = append(types, t)
		}
		sort.Strings(types)
		for _, t := range types {
			r, err := projection.ParseRule(pc.Events[t])
			if err != nil {
				return nil, &config.Error{Key: fmt.Sprintf("projections[%d].events.%s", i, t), Msg: err.Error()}
			}
			rules[t] = r
		}
		out = append(out, &projection.Projection{
			Name: pc.Name, Topic: pc.Topic, Handler: rules,
			Versioned: pc.IsVersioned(), AggregateTypes: pc.AggregateTypes,
		})
	}
	return out, nil
}

// ClientOpts returns the kgo options for TLS and SASL.
func ClientOpts(k *config.Kafka) ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if k.TLSEnabled() {
		tc := &tls.Config{ServerName: k.TLS.ServerName, InsecureSkipVerify: k.TLS.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
		if k.TLS.CAFile != "" {
			pem, err := os.ReadFile(k.TLS.CAFile)
			if err != nil {
				return nil, &config.Error{Key: "kafka.tls.caFile", Msg: err.Error()}
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, &config.Error{Key: "kafka.tls.caFile", Msg: "no PEM certificates in " + k.TLS.CAFile}
			}
			tc.RootCAs = pool
		}
		if k.TLS.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(k.TLS.CertFile, k.TLS.KeyFile)
			if err != nil {
				return nil, &config.Error{Key: "kafka.tls.certFile", Msg: err.Error()}
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if s := k.SASL; s != nil {
		switch s.Mechanism {
		case config.SASLPlain:
			opts = append(opts, kgo.SASL(plain.Auth{User: s.Username, Pass: s.Password}.AsMechanism()))
		case config.SASLScramSHA256:
			opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha256Mechanism()))
		case config.SASLScramSHA512:
			opts = append(opts, kgo.SASL(scram.Auth{User: s.Username, Pass: s.Password}.AsSha512Mechanism()))
		}
	}
	return opts, nil
}

// derived is what New builds from the configuration before it starts
// anything: the parts a bad configuration fails in, each error a
// *config.Error naming the key.
type derived struct {
	projections []*projection.Projection
	clientOpts  []kgo.Opt
	policy      projection.Policy
	rules       *effect.Rules // nil without sideEffects
}

func derive(cfg *config.Config) (d derived, err error) {
	if d.projections, err = Projections(cfg); err != nil {
		return d, err
	}
	if d.clientOpts, err = ClientOpts(&cfg.Kafka); err != nil {
		return d, err
	}
	if d.policy, err = projection.ParsePolicy(cfg.Gaps.OnTimeout); err != nil {
		return d, &config.Error{Key: "gaps.onTimeout", Msg: err.Error()}
	}
	if d.rules, err = EffectRules(cfg); err != nil {
		return d, err
	}
	return d, checkIngress(cfg)
}

// Check builds everything New derives from the configuration (projection
// rules, gap policy, side-effect rules, TLS and SASL client options, the
// ingress's credential and certificate files) without
// starting anything or connecting to a broker: `projector run --check`.
// Errors are *config.Error naming the key.
func Check(cfg *config.Config) error {
	_, err := derive(cfg)
	return err
}

// New starts the embedded broker if configured, opens the state store and
// builds the processor. It does not start processing: call Run.
func New(cfg *config.Config, o Options) (a *App, err error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a = &App{Config: cfg, Logger: log, Brokers: cfg.Kafka.Brokers}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	d, err := derive(cfg)
	if err != nil {
		return nil, err
	}
	warnDefaultInstanceID(cfg, log)
	copts := d.clientOpts
	a.sasl = &SASLWatch{}
	copts = append(copts, kgo.WithHooks(a.sasl))
	a.Registry = prometheus.NewRegistry()
	a.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	hook, err := metrics.KafkaClientHooks(a.Registry)
	if err != nil {
		return nil, err
	}
	copts = append(copts, hook)
	if cfg.Kafka.Embedded {
		eb := cfg.Kafka.EmbeddedBroker
		a.Embedded, err = broker.Start(broker.Options{Dir: eb.Dir, Listen: eb.Listen, Partitions: eb.Partitions})
		if err != nil {
			return nil, err
		}
		a.Brokers = []string{a.Embedded.Addr()}
		log.Info("embedded broker started (single node, for development and demos)", "addr", a.Embedded.Addr(), "dir", eb.Dir)
	}
	if o.Role == "" {
		o.Role = RoleAll
	}
	if err := a.newTracing(cfg, o); err != nil {
		return nil, err
	}
	if o.Role != RoleExecutor {
		if err := a.newProcessor(cfg, o, d, copts); err != nil {
			return nil, err
		}
	}
	if o.Role != RoleProcessor && o.Mode == processor.Live && len(cfg.SideEffects) > 0 {
		if err := a.newExecutor(cfg, o, copts); err != nil {
			return nil, err
		}
	}
	if err := a.newMetrics(cfg, copts, o.Mode); err != nil {
		return nil, err
	}
	if o.Mode == processor.Live && cfg.Ingress.Enabled() {
		if err := a.newIngress(cfg, copts, log); err != nil {
			return nil, err
		}
	}
	a.HTTP = httpserver.New(cfg.HTTP.Listen, a.Registry, a.Ready)
	return a, nil
}

// warnDefaultInstanceID says at start that kafka.instanceId was not set and
// is the host name: fine for one worker per host, but two processes that
// share a host name (several on one host, containers with a fixed hostname)
// share the id, fence each other and exit in turn – the operator should
// hear of the default before that happens (docs/contract.md#configuration).
func warnDefaultInstanceID(cfg *config.Config, log *slog.Logger) {
	if !cfg.Kafka.InstanceIDDefaulted {
		return
	}
	log.Warn("kafka.instanceId is not set: using the host name as the instance id",
		"instanceId", cfg.Kafka.InstanceID,
		"why", "the instance id makes the transactional ids and the static group membership; "+
			"two processes with one id fence each other and exit in turn: set kafka.instanceId "+
			"if another worker may run with this host name")
}

// newMetrics registers the contract's metrics over the parts this role runs.
func (a *App) newMetrics(cfg *config.Config, copts []kgo.Opt, mode processor.Mode) error {
	mo := metrics.OptionsFromConfig(cfg)
	mo.Logger = a.Logger
	mo.Pebble = map[string]func() *pebble.Metrics{}
	var err error
	if a.admin, err = kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(a.Brokers...)}, copts...)...); err != nil {
		return err
	}
	adm := kadm.NewClient(a.admin)
	var lags metrics.LagSources
	if a.Processor != nil {
		mo.Processor = metrics.Processor(a.Processor.Stats())
		mo.Pebble["processor"] = a.Store.Metrics
		inputs := cfg.Kafka.InputNames()
		if cfg.Ingress != nil && mode == processor.Live {
			// The ingress's claims are an input too: their lag is
			// requests waiting to be decided.
			inputs = append(slices.Clone(inputs), cfg.Ingress.ClaimsTopic)
		}
		lags = append(lags, metrics.NewKafkaLag(adm, cfg.Name, inputs...))
	}
	if a.Executor != nil {
		mo.Executor = metrics.Executor(a.Executor.Stats())
		mo.Pebble["executor"] = a.ExecutorStore.Metrics
		lags = append(lags, metrics.NewKafkaLag(adm, cfg.Name+"-executor", cfg.Kafka.EffectsTopic))
	}
	mo.Lag = lags
	a.Metrics, err = metrics.New(a.Registry, mo)
	return err
}

// Ready reports whether every loop this process runs has joined its group and
// restored all its partitions (/readyz), and if not, why.
func (a *App) Ready() (bool, string) {
	var why []string
	if a.Processor != nil {
		if ok, reason := a.Processor.Stats().Readiness(); !ok {
			why = append(why, "processor: "+reason)
		}
	}
	if a.Executor != nil {
		if ok, reason := a.Executor.Stats().Readiness(); !ok {
			why = append(why, "executor: "+reason)
		}
	}
	if a.Ingress != nil {
		if ok, reason := a.Ingress.Ready(); !ok {
			why = append(why, "ingress: "+reason)
		}
	}
	return len(why) == 0, strings.Join(why, "; ")
}

func (a *App) newProcessor(cfg *config.Config, o Options, d derived, copts []kgo.Opt) error {
	var err error
	if a.Store, err = openStore(ProcessorDir(cfg), seam.ProcessorStoreOptions(int64(cfg.State.CacheSize))); err != nil {
		return err
	}
	pc := processor.Config{
		Session: a.session(cfg, copts, a.Logger),
		Inputs:  cfg.Kafka.InputNames(), EffectsTopic: cfg.Kafka.EffectsTopic,
		WaitForInputs: !cfg.Kafka.Embedded,
		Projections:   d.projections, Dedup: dedup.NewStore(cfg.Dedup.Retention.Std()),
		HoldTimeout: cfg.Gaps.HoldTimeout.Std(), GapPolicy: d.policy, MaxHeld: int64(cfg.Gaps.MaxHeldPerAggregate),
		Mode: o.Mode,
	}
	pc.MaxRecordsPerTxn = cfg.Kafka.MaxRecordsPerTransaction
	pc.StandbyReplicas = cfg.State.StandbyReplicas
	pc.InputFormats, pc.SchemaRegistry = InputFormats(cfg)
	if in := cfg.Ingress; in != nil {
		pc.ReceiptsTopic, pc.ClaimsTopic, pc.IngressTopic = in.ReceiptsTopic, in.ClaimsTopic, in.Topic
	}
	if d.rules != nil {
		pc.EffectRules = d.rules
	}
	// The wiring opens the store itself: its metrics read Pebble's.
	seam.Processor(&pc, seam.Seams{Store: a.Store, Hooks: o.Hooks})
	a.Processor, err = processor.New(pc)
	return err
}

// session is the part of the processor's and the executor's configuration
// they share (processor.Session, and sideeffects.Session converted from it:
// the same fields): the same name, instance, brokers, client options,
// dead-letter topic and Kafka bounds, each with its own logger. The
// executor keeps its own records-per-transaction default
// (kafka.maxRecordsPerTransaction bounds the processor's transactions).
func (a *App) session(cfg *config.Config, copts []kgo.Opt, logger *slog.Logger) processor.Session {
	return processor.Session{
		Name: cfg.Name, InstanceID: cfg.Kafka.InstanceID, Brokers: a.Brokers, ClientOpts: copts,
		DeadLetterTopic:    cfg.Kafka.DeadLetterTopic,
		Partitions:         int32(cfg.Kafka.EmbeddedBroker.Partitions),
		MaxRecordBytes:     int(cfg.Kafka.MaxRecordBytes),
		TransactionTimeout: cfg.Kafka.TransactionTimeout.Std(),
		SessionTimeout:     cfg.Kafka.SessionTimeout.Std(),
		Logger:             logger,
		TracerProvider:     a.tracer,
	}
}

func (a *App) newExecutor(cfg *config.Config, o Options, copts []kgo.Opt) error {
	var err error
	if a.ExecutorStore, err = openStore(ExecutorDir(cfg), state.Options{CacheBytes: int64(cfg.State.CacheSize)}); err != nil {
		return err
	}
	wc := sideeffects.WorkerConfig{
		Session:      sideeffects.Session(a.session(cfg, copts, a.Logger.With("component", "executor"))),
		EffectsTopic: cfg.Kafka.EffectsTopic,
		Effects:      effects(SideEffects(cfg.SideEffects)),
	}
	seam.Executor(&wc, seam.Seams{Store: a.ExecutorStore, Hooks: o.ExecutorHooks})
	a.Executor, err = sideeffects.NewWorker(wc)
	return err
}

func openStore(dir string, o state.Options) (*state.Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", dir, err)
	}
	return state.Open(dir, o)
}

// Run runs the parts this role has (processor, executor, the HTTP server,
// the lag metrics, the ingress) until ctx is done (nil) or one of them
// fails, which stops the others.
func (a *App) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var parts []func(context.Context) error
	if a.Processor != nil {
		parts = append(parts, a.Processor.Run)
	}
	if a.Executor != nil {
		parts = append(parts, a.Executor.Run)
	}
	parts = append(parts, a.HTTP.Run)
	if a.Metrics != nil {
		parts = append(parts, a.Metrics.Run)
	}
	if a.Ingress != nil {
		parts = append(parts, a.Ingress.Run)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(parts))
	for i, run := range parts {
		wg.Go(func() {
			if errs[i] = run(ctx); errs[i] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	a.stopTracing() // every part is done: flush their spans
	return a.sasl.Explain(&a.Config.Kafka, errors.Join(errs...))
}

// Close stops what New started. It is idempotent.
func (a *App) Close() error {
	a.stopTracing()
	var errs []error
	if a.admin != nil {
		a.admin.Close()
		a.admin = nil
	}
	for _, st := range []**state.Store{&a.Store, &a.ExecutorStore} {
		if *st != nil {
			errs = append(errs, (*st).Close())
			*st = nil
		}
	}
	if a.Embedded != nil {
		a.Embedded.Close()
		a.Embedded = nil
	}
	return errors.Join(errs...)
}

// Connect returns broker addresses for an operator command. Against a real
// cluster they are kafka.brokers. With the embedded broker, a running worker
// already serves it on embeddedBroker.listen: the command connects to that;
// when nothing listens there, it starts the broker from its data directory
// for the duration of the command (close releases it).
func Connect(cfg *config.Config, log *slog.Logger) (brokers []string, closeFn func(), err error) {
	if !cfg.Kafka.Embedded {
		return cfg.Kafka.Brokers, func() {}, nil
	}
	eb := cfg.Kafka.EmbeddedBroker
	if c, err := net.DialTimeout("tcp", eb.Listen, 500*time.Millisecond); err == nil {
		c.Close()
		return []string{eb.Listen}, func() {}, nil
	}
	b, err := broker.Start(broker.Options{Dir: eb.Dir, Listen: eb.Listen, Partitions: eb.Partitions})
	if err != nil {
		return nil, nil, err
	}
	if log != nil {
		log.Debug("started the embedded broker for this command", "addr", b.Addr(), "dir", eb.Dir)
	}
	return []string{b.Addr()}, b.Close, nil
}
