package metrics

import (
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaClientHooks registers franz-go client metrics on reg, as
// projector_kafka_*: connections, bytes and errors per broker (node label:
// kgo.NodeName, "seed_<n>" for a seed broker), request latency, throttling,
// and produced and fetched records and bytes per topic. It returns the kgo
// option that feeds them.
//
// The option may be given to any number of clients, at once or one after
// another (the processor builds several clients from the same ClientOpts):
// the counters add up over all of them and never reset when a client closes.
// (kprom's hook can serve only one client per registry at a time: it
// registers its collectors in OnNewClient and unregisters them in
// OnClientClosed, so a second client panics on a duplicate registration.)
func KafkaClientHooks(reg prometheus.Registerer) (kgo.Opt, error) {
	h := newKafkaHooks()
	for i, c := range h.collectors() {
		if err := reg.Register(c); err != nil {
			for _, r := range h.collectors()[:i] {
				reg.Unregister(r)
			}
			return nil, fmt.Errorf("metrics: register kafka client metrics: %w", err)
		}
	}
	return kgo.WithHooks(h), nil
}

type kafkaHooks struct {
	connects, connectErrors, disconnects           *prometheus.CounterVec // node
	writeBytes, writeErrors, readBytes, readErrors *prometheus.CounterVec // node
	throttle                                       *prometheus.CounterVec // node
	requestSeconds                                 prometheus.Histogram
	produceRecords, produceBytes                   *prometheus.CounterVec // topic
	fetchRecords, fetchBytes                       *prometheus.CounterVec // topic
}

func newKafkaHooks() *kafkaHooks {
	vec := func(name, help, label string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "kafka", Name: name, Help: help}, []string{label})
	}
	return &kafkaHooks{
		connects:      vec("connects_total", "Connections opened to a broker.", "node"),
		connectErrors: vec("connect_errors_total", "Failed connection attempts to a broker.", "node"),
		disconnects:   vec("disconnects_total", "Connections to a broker closed.", "node"),
		writeBytes:    vec("write_bytes_total", "Bytes written to a broker.", "node"),
		writeErrors:   vec("write_errors_total", "Failed writes to a broker.", "node"),
		readBytes:     vec("read_bytes_total", "Bytes read from a broker.", "node"),
		readErrors:    vec("read_errors_total", "Failed reads from a broker.", "node"),
		throttle:      vec("throttle_seconds_total", "Time a broker asked the client to wait (quota throttling).", "node"),
		requestSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Subsystem: "kafka", Name: "request_seconds",
			Help:    "Broker request latency, from write start to response read (fetches include their wait).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		produceRecords: vec("produce_records_total", "Records produced, by topic.", "topic"),
		produceBytes:   vec("produce_bytes_total", "Uncompressed bytes of records produced, by topic.", "topic"),
		fetchRecords:   vec("fetch_records_total", "Records fetched, by topic (before read_committed filtering).", "topic"),
		fetchBytes:     vec("fetch_bytes_total", "Uncompressed bytes of records fetched, by topic.", "topic"),
	}
}

func (h *kafkaHooks) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		h.connects, h.connectErrors, h.disconnects, h.writeBytes, h.writeErrors, h.readBytes, h.readErrors,
		h.throttle, h.requestSeconds, h.produceRecords, h.produceBytes, h.fetchRecords, h.fetchBytes,
	}
}

var (
	_ kgo.HookBrokerConnect       = (*kafkaHooks)(nil)
	_ kgo.HookBrokerDisconnect    = (*kafkaHooks)(nil)
	_ kgo.HookBrokerWrite         = (*kafkaHooks)(nil)
	_ kgo.HookBrokerRead          = (*kafkaHooks)(nil)
	_ kgo.HookBrokerThrottle      = (*kafkaHooks)(nil)
	_ kgo.HookBrokerE2E           = (*kafkaHooks)(nil)
	_ kgo.HookProduceBatchWritten = (*kafkaHooks)(nil)
	_ kgo.HookFetchBatchRead      = (*kafkaHooks)(nil)
)

func node(meta kgo.BrokerMetadata) string { return kgo.NodeName(meta.NodeID) }

func (h *kafkaHooks) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		h.connectErrors.WithLabelValues(node(meta)).Inc()
		return
	}
	h.connects.WithLabelValues(node(meta)).Inc()
}

func (h *kafkaHooks) OnBrokerDisconnect(meta kgo.BrokerMetadata, _ net.Conn) {
	h.disconnects.WithLabelValues(node(meta)).Inc()
}

func (h *kafkaHooks) OnBrokerWrite(meta kgo.BrokerMetadata, _ int16, n int, _, _ time.Duration, err error) {
	h.writeBytes.WithLabelValues(node(meta)).Add(float64(n))
	if err != nil {
		h.writeErrors.WithLabelValues(node(meta)).Inc()
	}
}

func (h *kafkaHooks) OnBrokerRead(meta kgo.BrokerMetadata, _ int16, n int, _, _ time.Duration, err error) {
	h.readBytes.WithLabelValues(node(meta)).Add(float64(n))
	if err != nil {
		h.readErrors.WithLabelValues(node(meta)).Inc()
	}
}

func (h *kafkaHooks) OnBrokerThrottle(meta kgo.BrokerMetadata, d time.Duration, _ bool) {
	h.throttle.WithLabelValues(node(meta)).Add(d.Seconds())
}

func (h *kafkaHooks) OnBrokerE2E(_ kgo.BrokerMetadata, _ int16, e2e kgo.BrokerE2E) {
	if e2e.Err() == nil {
		h.requestSeconds.Observe(e2e.DurationE2E().Seconds())
	}
}

func (h *kafkaHooks) OnProduceBatchWritten(_ kgo.BrokerMetadata, topic string, _ int32, m kgo.ProduceBatchMetrics) {
	h.produceRecords.WithLabelValues(topic).Add(float64(m.NumRecords))
	h.produceBytes.WithLabelValues(topic).Add(float64(m.UncompressedBytes))
}

func (h *kafkaHooks) OnFetchBatchRead(_ kgo.BrokerMetadata, topic string, _ int32, m kgo.FetchBatchMetrics) {
	h.fetchRecords.WithLabelValues(topic).Add(float64(m.NumRecords))
	h.fetchBytes.WithLabelValues(topic).Add(float64(m.UncompressedBytes))
}
