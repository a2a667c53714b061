package wiring

import (
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/ingress"
	"github.com/projector-dev/projector/internal/app/ingressauth"
)

// checkIngress reads every file the ingress's Gate names (tokens, JWKS,
// certificates), so that `projector run --check` refuses a bad one with
// the key; it fetches nothing.
func checkIngress(cfg *config.Config) error {
	if !cfg.Ingress.Enabled() {
		return nil
	}
	_, err := ingressauth.New(cfg.Ingress, ingressauth.Options{})
	return err
}

// newIngress builds the HTTP ingress and its Gate.
func (a *App) newIngress(cfg *config.Config, copts []kgo.Opt, log *slog.Logger) error {
	in := cfg.Ingress
	log = log.With("component", "ingress")
	gate, err := ingressauth.New(in, ingressauth.Options{Logger: log})
	if err != nil {
		return err
	}
	if err := gate.Register(a.Registry); err != nil {
		return err
	}
	a.Ingress, err = ingress.New(ingress.Config{
		Listen: in.Listen, Topic: in.Topic, ReceiptsTopic: in.ReceiptsTopic, ClaimsTopic: in.ClaimsTopic, Timeout: in.Timeout.Std(),
		MaxBodyBytes: int64(in.MaxBodyBytes), MaxBatch: in.MaxBatch, RequireTenant: in.RequireTenant,
		MaxRecordBytes: int(cfg.Kafka.MaxRecordBytes), Partitions: int32(cfg.Kafka.EmbeddedBroker.Partitions),
		Gate:    gate,
		Brokers: a.Brokers, ClientOpts: copts, Logger: log, Registerer: a.Registry,
		TracerProvider: a.tracer,
	})
	return err
}
