package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/operator/rebuild"
)

const diffExample = `  projector diff --config configs/example.yaml --topic case-overview.v1 --topic case-overview.v2
  projector diff --brokers 10.0.0.5:9092 --topic case-overview.v1 --topic case-overview.v2 --max 100

Both topics are read read_committed to their end; the last record per key is
compared by version and state (JSON values; a tombstone is "deleted").
Each key listed as different gets a likely cause, named from what the two
records show (versions, lastEventId, occurredAt): a version gap held or
skipped by a time-based gap policy, a redelivery applied again after dedup
retention expired, a key only in one topic, a tombstone against a state, a
changed rule. The differences a rebuild cannot avoid: docs/rebuild.md.
Exit code 0: identical; 1: differences (or a failure); 2: usage.`

// errTopicsDiffer makes `projector diff` exit 1 after printing its report.
var errTopicsDiffer = errors.New("diff: the topics differ")

// runDiff is `projector diff`: compare two projection topics key by key.
func runDiff(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("diff", diffExample).withConfig(false)
	cf := &fs.common
	topics := fs.StringArray("topic", nil, "a projection topic; give it twice: --topic A --topic B")
	maxKeys := fs.Int("max", rebuild.DefaultDiffMax, "list at most this many keys that differ (negative: all)")
	if err := fs.parse(args, stdout); err != nil {
		return err
	}
	if len(*topics) != 2 {
		return usageError{fmt.Sprintf("diff: want exactly two --topic flags, got %d", len(*topics))}
	}
	if (*topics)[0] == (*topics)[1] {
		return usageError{"diff: the two topics are the same"}
	}
	log, err := cf.logger(stderr)
	if err != nil {
		return err
	}
	var brokers []string
	var copts []kgo.Opt
	switch {
	case cf.config != "":
		cfg, err := cf.load()
		if err != nil {
			return err
		}
		if copts, err = wiring.ClientOpts(&cfg.Kafka); err != nil {
			return err
		}
		b, closeFn, err := wiring.Connect(cfg, log)
		if err != nil {
			return err
		}
		defer closeFn()
		brokers = b
	case cf.brokers != "" && cf.brokers != "embedded":
		for _, b := range strings.Split(cf.brokers, ",") {
			if b = strings.TrimSpace(b); b != "" {
				brokers = append(brokers, b)
			}
		}
	}
	if len(brokers) == 0 {
		return usageError{"diff: --config or --brokers HOST:PORT is required"}
	}
	rep, err := rebuild.Diff(ctx, rebuild.DiffOptions{Brokers: brokers, ClientOpts: copts, A: (*topics)[0], B: (*topics)[1], Max: *maxKeys})
	if err != nil {
		return err
	}
	rep.Write(stdout)
	if !rep.Identical() {
		return fmt.Errorf("%w: %d different, %d missing in %s, %d missing in %s",
			errTopicsDiffer, rep.Different, rep.MissingInA, rep.A, rep.MissingInB, rep.B)
	}
	return nil
}
