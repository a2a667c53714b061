package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/projector-dev/projector/internal/app/wiring"
)

const runExample = `  projector run --config configs/example.yaml
  projector run --config configs/example.yaml --brokers 10.0.0.5:9092 --log-format json
  projector run --config /etc/projector/projector.yaml --role processor --check`

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("run", runExample).withConfig(true)
	role := fs.String("role", "all", "what to run: processor (consume, project, enqueue side effects), executor (call the webhooks) or all")
	check := fs.Bool("check", false, "validate the flags and the configuration (environment expanded, rules parsed, TLS files read), print a summary and exit 0, or 2 naming the problem; starts nothing and connects to nothing")
	if err := fs.parse(args, stdout); err != nil {
		return err
	}
	switch wiring.Role(*role) {
	case wiring.RoleAll, wiring.RoleProcessor, wiring.RoleExecutor:
	default:
		return usageError{"--role: want processor, executor or all, got " + *role}
	}
	log, err := fs.common.logger(stderr)
	if err != nil {
		return err
	}
	cfg, err := fs.common.load()
	if err != nil {
		return err
	}
	if *check {
		if err := wiring.Check(cfg); err != nil {
			return err
		}
		brokers := strings.Join(cfg.Kafka.Brokers, ",")
		if cfg.Kafka.Embedded {
			brokers = "embedded"
		}
		fmt.Fprintf(stdout, "configuration OK: name=%s instanceId=%s role=%s brokers=%s input=%s state.dir=%s http.listen=%s\n",
			cfg.Name, cfg.Kafka.InstanceID, *role, brokers, strings.Join(cfg.Kafka.InputNames(), ","), cfg.State.Dir, cfg.HTTP.Listen)
		return nil
	}
	a, err := wiring.New(cfg, wiring.Options{Logger: log, Role: wiring.Role(*role)})
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
