// Package app wires a loaded configuration into running parts: the embedded
// broker (when kafka.brokers is "embedded"), the Pebble state store and the
// processor. The CLI commands (run, demo, rebuild, bench) share it so that
// they build the worker the same way.
package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/broker"
	"github.com/projector-dev/projector/internal/config"
	"github.com/projector-dev/projector/internal/state"
	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/projection"
)

// App is a wired worker. Close releases everything it started, in reverse order.
type App struct {
	Config    *config.Config
	Brokers   []string
	Embedded  *broker.Embedded // nil against a real cluster
	Store     *state.Store
	Processor *processor.Processor
	Logger    *slog.Logger
}

// Options adjust the wiring for a command.
type Options struct {
	Logger *slog.Logger
	Mode   processor.Mode
	// Hooks are passed to the processor (tests).
	Hooks *processor.Hooks
}

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
	projs, err := Projections(cfg)
	if err != nil {
		return nil, err
	}
	copts, err := ClientOpts(&cfg.Kafka)
	if err != nil {
		return nil, err
	}
	if cfg.Kafka.Embedded {
		eb := cfg.Kafka.EmbeddedBroker
		a.Embedded, err = broker.Start(broker.Options{Dir: eb.Dir, Listen: eb.Listen, Partitions: eb.Partitions})
		if err != nil {
			return nil, err
		}
		a.Brokers = []string{a.Embedded.Addr()}
		log.Info("embedded broker started (single node, for development and demos)", "addr", a.Embedded.Addr(), "dir", eb.Dir)
	}
	if err := os.MkdirAll(cfg.State.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("state dir %s: %w", cfg.State.Dir, err)
	}
	a.Store, err = state.Open(cfg.State.Dir, state.Options{CacheBytes: int64(cfg.State.CacheSize)})
	if err != nil {
		return nil, err
	}
	policy, err := projection.ParsePolicy(cfg.Gaps.OnTimeout)
	if err != nil {
		return nil, &config.Error{Key: "gaps.onTimeout", Msg: err.Error()}
	}
	a.Processor, err = processor.New(processor.Config{
		Name: cfg.Name, InstanceID: cfg.Kafka.InstanceID, Brokers: a.Brokers, ClientOpts: copts,
		Inputs: cfg.Kafka.Input, DeadLetterTopic: cfg.Kafka.DeadLetterTopic, EffectsTopic: cfg.Kafka.EffectsTopic,
		Partitions:  int32(cfg.Kafka.EmbeddedBroker.Partitions),
		Projections: projs, Store: a.Store, Dedup: dedup.NewStore(cfg.Dedup.Retention.Std()),
		HoldTimeout: cfg.Gaps.HoldTimeout.Std(), GapPolicy: policy, MaxHeld: int64(cfg.Gaps.MaxHeldPerAggregate),
		MaxRecordsPerTxn:   cfg.Kafka.MaxRecordsPerTransaction,
		TransactionTimeout: cfg.Kafka.TransactionTimeout.Std(), SessionTimeout: cfg.Kafka.SessionTimeout.Std(),
		Mode: o.Mode, Logger: log, Hooks: o.Hooks,
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// Run runs the processor until ctx is done (nil) or it fails.
func (a *App) Run(ctx context.Context) error {
	return a.Processor.Run(ctx)
}

// Close stops what New started. It is idempotent.
func (a *App) Close() error {
	var errs []error
	if a.Store != nil {
		errs = append(errs, a.Store.Close())
		a.Store = nil
	}
	if a.Embedded != nil {
		a.Embedded.Close()
		a.Embedded = nil
	}
	return errors.Join(errs...)
}
