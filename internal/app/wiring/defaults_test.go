package wiring

import (
	"testing"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/processor"
)

// TestConfigDefaultsAreTheProcessors: the configuration's defaults of the
// processor's settings are the processor's own, which a library user gets
// from a zero processor.Config. The config package cannot name them yet
// (sideeffects/effect imports it, and processor imports effect), so they
// are written twice and held equal here.
func TestConfigDefaultsAreTheProcessors(t *testing.T) {
	for _, c := range []struct {
		name       string
		conf, proc int64
	}{
		{"partitions", config.DefaultEmbeddedPartitions, processor.DefaultPartitions},
		{"records per transaction", config.DefaultMaxRecordsPerTransaction, processor.DefaultMaxRecordsPerTxn},
		{"hold timeout", int64(config.DefaultHoldTimeout), int64(processor.DefaultHoldTimeout)},
		{"held per aggregate", config.DefaultMaxHeldPerAggregate, processor.DefaultMaxHeld},
		{"transaction timeout", int64(config.DefaultTransactionTimeout), int64(processor.DefaultTransactionTimeout)},
		{"session timeout", int64(config.DefaultSessionTimeout), int64(processor.DefaultSessionTimeout)},
	} {
		if c.conf != c.proc {
			t.Errorf("%s: the configuration defaults to %d, the processor to %d (durations in ns)", c.name, c.conf, c.proc)
		}
	}
}
