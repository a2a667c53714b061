// Package broker runs the embedded Kafka-compatible broker: franz-go's kfake,
// single node, over real TCP, persisted to a directory so that it survives
// restarts. It is for development, demos and tests; production points
// kafka.brokers at a real cluster.
package broker

import (
	"crypto/rand"
	"fmt"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Options configure the embedded broker.
type Options struct {
	// Dir persists the broker's log; "" keeps everything in memory.
	Dir string
	// Listen is host:port; port 0 picks a free port.
	Listen string
	// Partitions is the default partition count of auto-created topics.
	Partitions int
	// SyncWrites fsyncs every produced batch (slower, survives power loss).
	SyncWrites bool
	// Extra kfake options (TLS, SASL, fault injection in tests).
	Extra []kfake.Opt
}

// Embedded is a running embedded broker.
type Embedded struct {
	Cluster *kfake.Cluster
	addr    string
}

// Start starts the broker.
func Start(o Options) (*Embedded, error) {
	host, portS, err := net.SplitHostPort(o.Listen)
	if o.Listen == "" {
		host, portS, err = "127.0.0.1", "0", nil
	}
	if err != nil {
		return nil, fmt.Errorf("broker: listen address %q: %w", o.Listen, err)
	}
	port, err := strconv.Atoi(portS)
	if err != nil {
		return nil, fmt.Errorf("broker: listen port %q: %w", portS, err)
	}
	if o.Partitions <= 0 {
		o.Partitions = 4
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.DefaultNumPartitions(o.Partitions),
		// Create a topic on first use when the client asks for it, as a
		// development Kafka with auto.create.topics.enable does. franz-go
		// clients and the worker create their topics explicitly, but
		// librdkafka producers (kcat, confluent-kafka-*) rely on the
		// metadata request's AllowAutoTopicCreation and would otherwise
		// fail with "Unknown topic or partition" on a new topic.
		kfake.AllowAutoTopicCreation(),
		kfake.ListenFn(func(network, _ string) (net.Listener, error) {
			return net.Listen(network, net.JoinHostPort(host, strconv.Itoa(port)))
		}),
	}
	if o.Dir != "" {
		opts = append(opts, kfake.DataDir(o.Dir))
	}
	if o.SyncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	opts = append(opts, o.Extra...)
	c, err := NewCluster(opts...)
	if err != nil {
		return nil, fmt.Errorf("broker: start embedded broker on %s: %w", net.JoinHostPort(host, portS), err)
	}
	return &Embedded{Cluster: c, addr: c.ListenAddrs()[0]}, nil
}

// NewCluster is kfake.NewCluster answering as a Kafka broker in its default
// configuration where kfake does not (noClientMetrics). Start uses it, and so
// do the tests that need kfake's options directly (several brokers, SASL,
// ACLs, seeded topics).
func NewCluster(opts ...kfake.Opt) (*kfake.Cluster, error) {
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		return nil, err
	}
	noClientMetrics(c)
	return c, nil
}

// noClientMetrics answers KIP-714's GetTelemetrySubscriptions as a Kafka
// broker without client-metrics resources does (its default): no metrics
// requested, ask again after the push interval. kfake subscribes every
// client to all metrics instead, so each client built a compressor and
// pushed its metrics every 30 s and on close, for nobody: a tenth of some
// tests' CPU, one client at a time. PushTelemetry stays kfake's.
func noClientMetrics(c *kfake.Cluster) {
	c.ControlKey(int16(kmsg.GetTelemetrySubscriptions), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		greq := req.(*kmsg.GetTelemetrySubscriptionsRequest)
		resp := greq.ResponseKind().(*kmsg.GetTelemetrySubscriptionsResponse)
		resp.ClientInstanceID = greq.ClientInstanceID
		if resp.ClientInstanceID == [16]byte{} {
			_, _ = rand.Read(resp.ClientInstanceID[:]) // never fails (crypto/rand)
		}
		resp.PushIntervalMillis = 300_000 // Kafka's default interval.ms
		resp.AcceptedCompressionTypes = []int8{0}
		return resp, nil, true
	})
}

// Addr is the broker's host:port.
func (e *Embedded) Addr() string { return e.addr }

// Close stops the broker, persisting its state when it has a directory.
func (e *Embedded) Close() { e.Cluster.Close() }
