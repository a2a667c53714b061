package wiring

import (
	"fmt"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/app/config"
)

// SASLWatch notices a failed SASL exchange. Real brokers answer bad
// credentials with SASL_AUTHENTICATION_FAILED, which the client reports by
// name; some (kfake among them) close the connection instead, which the
// client reports as a bare EOF. Add it to a client with kgo.WithHooks.
type SASLWatch struct{ failed atomic.Bool }

// OnBrokerE2E implements kgo.HookBrokerE2E.
func (w *SASLWatch) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e kgo.BrokerE2E) {
	if key == int16(kmsg.SASLAuthenticate) && e.Err() != nil {
		w.failed.Store(true)
	}
}

// Explain wraps err with the cause when a SASL exchange failed.
func (w *SASLWatch) Explain(k *config.Kafka, err error) error {
	if err == nil || w == nil || !w.failed.Load() || k.SASL == nil {
		return err
	}
	return fmt.Errorf("SASL authentication failed (mechanism %s, user %q): the broker rejected the credentials "+
		"(check kafka.sasl.username and kafka.sasl.password): %w", k.SASL.Mechanism, k.SASL.Username, err)
}
