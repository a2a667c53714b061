package main

import (
	"context"
	"io"

	"github.com/spf13/pflag"

	"github.com/projector-dev/projector/internal/app"
)

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cf commonFlags
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	cf.register(fs, true)
	role := fs.String("role", "all", "what to run: processor, executor or all")
	if err := parse(fs, args, stdout, "  projector run --config configs/example.yaml\n  projector run --config configs/example.yaml --brokers 10.0.0.5:9092 --log-format json"); err != nil {
		return err
	}
	switch app.Role(*role) {
	case app.RoleAll, app.RoleProcessor, app.RoleExecutor:
	default:
		return usageError{"--role: want processor, executor or all, got " + *role}
	}
	log, err := cf.logger(stderr)
	if err != nil {
		return err
	}
	cfg, err := cf.load()
	if err != nil {
		return err
	}
	a, err := app.New(cfg, app.Options{Logger: log, Role: app.Role(*role)})
	if err != nil {
		return err
	}
	defer a.Close()
	if err := a.Run(ctx); err != nil {
		return err
	}
	log.Info("stopped cleanly")
	return nil
}
