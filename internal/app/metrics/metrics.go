package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/processor"
)

// Namespace prefixes every metric name.
const Namespace = "projector"

// RecordLevel is the projection label of record-level outcomes, which
// processor.Stats counts under projection "".
const RecordLevel = "_record"

// Defaults.
const (
	DefaultLagInterval = 15 * time.Second
	DefaultLagTimeout  = 10 * time.Second
	// LagWarnAfter consecutive failed lag refreshes log one WARN. A single
	// failure is routine on a healthy start and during rebalances (the
	// group coordinator still loading, a partition leader moving) and is
	// only counted (projector_consumer_lag_errors_total) and logged at
	// debug; a WARN in the middle of the demo's summary told the user
	// nothing they could act on.
	LagWarnAfter = 3
)

// EnvelopeFields are the envelope fields an invalid record can be
// dead-lettered for ("invalid:<field>"); "value" is a value that is not an
// envelope at all.
var EnvelopeFields = []string{
	"eventId", "eventType", "aggregateId", "aggregateType", "aggregateVersion", "tenantId",
	"occurredAt", "correlationId", "causationId", "producer", "payload", "value",
}

// EffectStatuses are the status label values of projector_side_effects_total.
var EffectStatuses = []string{"enqueued", "succeeded", "failed", "unknown", "suppressed", "duplicate"}

// TransactionResults are the result label values of projector_transactions_total.
var TransactionResults = []string{"committed", "aborted", "failed"}

// DefaultTransactionBuckets span 1ms to ~16s.
var DefaultTransactionBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)

// DeadLetterReasons returns every dead-letter reason: "invalid:<field>" for
// EnvelopeFields, then conflict, gap-timeout, handler-error and too-large.
func DeadLetterReasons() []string {
	out := make([]string, 0, len(EnvelopeFields)+4)
	for _, f := range EnvelopeFields {
		out = append(out, "invalid:"+f)
	}
	return append(out, processor.ReasonConflict, processor.ReasonGapTimeout, processor.ReasonHandlerError, processor.ReasonTooLarge)
}

// Loop is the counters of one exactly-once loop (internal/core/eos): both
// *processor.Stats and *sideeffects.WorkerStats implement it.
type Loop interface {
	Transactions(result string) int64
	Restored() int64
	Ready() bool
	Assigned() []processor.Partition
	// MissingInputs are the input topics the loop waits for
	// (projector_input_topic_missing); RestoreRetries the restore attempts
	// repeated after a broker error (projector_restore_retries_total).
	MissingInputs() []string
	RestoreRetries() int64
	Observe(fn func(processor.TxnObservation))
}

// Source is the processor's counters by label; Processor adapts
// *processor.Stats to it.
type Source interface {
	Loop
	Events(projection, outcome string) int64
	DeadLetters(reason string) int64
	Effects(effect, status string) int64
	Gaps() map[string]processor.GapSummary
	// HeldTransactions counts the transactions aborted because a record
	// had to wait (projector_held_transactions_total).
	HeldTransactions() int64
	// Standby is the standby replicas' state (projector_standby_*).
	Standby() processor.StandbyStats
}

// ExecutorSource is the side-effect executor's counters by label; Executor
// adapts *sideeffects.WorkerStats to it. If it also has a method
// Pending() int64, that feeds projector_side_effects_pending (unless
// Options.Pending is set).
type ExecutorSource interface {
	Loop
	Effects(effect, status string) int64
}

// Options configure New. Zero values take the documented defaults; label
// value lists are copied.
type Options struct {
	// Processor and Executor are the counters of the loops this process
	// runs (processor.Processor.Stats, sideeffects.Worker.Stats); either may
	// be nil (role executor, role processor, rebuild). The loops' series add
	// up: transactions, restored records, side-effect counts; lag is reported
	// for the partitions either has assigned, and projector_ready is 1 when
	// every present loop is ready.
	Processor Source
	Executor  ExecutorSource
	// Projections and Effects are the configured names (OptionsFromConfig).
	Projections []string
	Effects     []string
	// Inputs are the configured input topics
	// (projector_input_topic_missing).
	Inputs []string
	// Outcomes default to processor.Outcomes, DeadLetterReasons to
	// DeadLetterReasons(), EffectStatuses to EffectStatuses.
	Outcomes          []string
	DeadLetterReasons []string
	EffectStatuses    []string
	// Pending, if set, returns the number of side-effect ledger entries not
	// yet terminal (projector_side_effects_pending); nil asks the Executor
	// (see ExecutorSource), else reports 0. It is called at scrape time and
	// must be cheap and safe concurrently.
	Pending func() int64
	// Pebble maps a store label value ("processor", "executor") to the
	// store's metrics (state.Store.Metrics); it adds the projector_pebble_*
	// series with label store. They are called at scrape time, so the stores
	// must outlive the HTTP server.
	Pebble map[string]func() *pebble.Metrics
	// Lag, if set, is polled by Run every LagInterval (default
	// DefaultLagInterval) with a LagTimeout (default DefaultLagTimeout).
	Lag         LagSource
	LagInterval time.Duration
	LagTimeout  time.Duration
	// TransactionBuckets default to DefaultTransactionBuckets.
	TransactionBuckets []float64
	// Now is the clock for projector_gap_oldest_seconds; default time.Now.
	Now func() time.Time
	// Logger reports lag refresh failures; default discards.
	Logger *slog.Logger
}

// OptionsFromConfig names the configured projections and side effects.
func OptionsFromConfig(cfg *config.Config) Options {
	var o Options
	for _, p := range cfg.Projections {
		o.Projections = append(o.Projections, p.Name)
	}
	for _, s := range cfg.SideEffects {
		o.Effects = append(o.Effects, s.Name)
	}
	o.Inputs = append(o.Inputs, cfg.Kafka.InputNames()...)
	return o
}

func (o *Options) applyDefaults() {
	if o.Outcomes == nil {
		for _, oc := range processor.Outcomes {
			o.Outcomes = append(o.Outcomes, oc.String())
		}
	}
	if o.DeadLetterReasons == nil {
		o.DeadLetterReasons = DeadLetterReasons()
	}
	if o.EffectStatuses == nil {
		o.EffectStatuses = EffectStatuses
	}
	if o.TransactionBuckets == nil {
		o.TransactionBuckets = DefaultTransactionBuckets
	}
	if o.LagInterval <= 0 {
		o.LagInterval = DefaultLagInterval
	}
	if o.LagTimeout <= 0 {
		o.LagTimeout = DefaultLagTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Pending == nil && !isNil(o.Executor) {
		if p, ok := o.Executor.(interface{ Pending() int64 }); ok {
			o.Pending = p.Pending
		}
	}
	// Copy, deduplicated, so that later changes to the caller's slices do not
	// change the series and a name listed twice is not collected twice.
	for _, l := range []*[]string{&o.Projections, &o.Effects, &o.Inputs, &o.Outcomes, &o.DeadLetterReasons, &o.EffectStatuses} {
		*l = uniq(*l)
	}
}

func uniq(in []string) []string {
	out := make([]string, 0, len(in))
	seen := make(map[string]bool, len(in))
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// Metrics is the registered set of projector metrics.
type Metrics struct {
	o       Options
	txnTime prometheus.Histogram

	events, gapsOpen, gapOldest, effects, pending, txns, lag, restored, dlq, ready, assigned, lagErrors *prometheus.Desc
	missing, restoreRetries, held                                                                       *prometheus.Desc
	standby, standbyCaught, standbyRecords                                                              *prometheus.Desc

	proc  Source // never nil: zeroSource without a processor
	loops []Loop // the loops present

	mu        sync.Mutex
	lagValues map[TopicPartition]int64
	lagErrs   int64
	// lagFailStreak counts consecutive failed refreshes (refreshLag's
	// goroutine only): see LagWarnAfter.
	lagFailStreak int
	runOnce       sync.Once
}

// New registers the projector metrics on reg. It registers nothing if it
// fails.
func New(reg prometheus.Registerer, o Options) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("metrics: nil Registerer")
	}
	for _, p := range o.Projections {
		if p == RecordLevel {
			return nil, fmt.Errorf("metrics: projection name %q is reserved for record-level outcomes", RecordLevel)
		}
	}
	o.applyDefaults()
	m := &Metrics{
		o:         o,
		proc:      zeroSource{},
		lagValues: make(map[TopicPartition]int64),
		txnTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "transaction_seconds",
			Help:    "Duration of committed transactions, from begin to commit acknowledged.",
			Buckets: o.TransactionBuckets,
		}),
		events: desc("events_total", "Committed event outcomes by projection (_record: record-level) and outcome.", "projection", "outcome"),
		gapsOpen: desc("gaps_open",
			"Aggregates with held events (an open version gap) on the assigned partitions.", "projection"),
		gapOldest: desc("gap_oldest_seconds",
			"Age of the oldest open version gap on the assigned partitions; 0 when none.", "projection"),
		effects: desc("side_effects_total", "Side-effect intents and executions by effect and status.", "effect", "status"),
		pending: desc("side_effects_pending", "Side-effect ledger entries not yet succeeded or failed."),
		txns:    desc("transactions_total", "Kafka transactions by result.", "result"),
		lag: desc("consumer_lag",
			"Records between the group's committed offset and the end of an assigned partition.", "topic", "partition"),
		restored:  desc("restore_records_total", "Changelog records restored into the state store."),
		dlq:       desc("deadletter_total", "Committed dead-lettered records by reason.", "reason"),
		ready:     desc("ready", "1 when every loop has joined its consumer group and restored every partition assigned to it (also when none is)."),
		assigned:  desc("assigned_partitions", "Input partitions assigned to this instance."),
		lagErrors: desc("consumer_lag_errors_total", "Failed consumer lag refreshes."),
		missing: desc("input_topic_missing",
			"1 while a configured input topic does not exist (the worker waits for it; it creates inputs only on the embedded broker).", "topic"),
		restoreRetries: desc("restore_retries_total", "Restore attempts repeated after a transient broker error."),
		held: desc("held_transactions_total",
			"Transactions aborted because a record had to wait (the Schema Registry was unavailable); their records are processed again."),
		standby: desc("standby_partitions",
			"Input partitions this instance keeps a standby copy of (state.standbyReplicas)."),
		standbyCaught: desc("standby_caught_up_partitions",
			"Standby partitions whose last read reached their changelog's end."),
		standbyRecords: desc("standby_records_total",
			"Changelog records the standby replicas wrote into the state store."),
	}
	if !isNil(o.Processor) {
		m.proc = o.Processor
		m.loops = append(m.loops, o.Processor)
	}
	if !isNil(o.Executor) {
		m.loops = append(m.loops, o.Executor)
	} else {
		m.o.Executor = nil
	}
	cs := []prometheus.Collector{collector{m}, m.txnTime}
	if len(o.Pebble) > 0 {
		cs = append(cs, newPebbleCollector(o.Pebble))
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, r := range cs[:i] {
				reg.Unregister(r)
			}
			return nil, fmt.Errorf("metrics: register: %w", err)
		}
	}
	// Last: the loops have no way to remove an observer.
	for _, l := range m.loops {
		l.Observe(func(t processor.TxnObservation) {
			if t.Result == "committed" {
				m.txnTime.Observe(t.Duration.Seconds())
			}
		})
	}
	return m, nil
}

// isNil reports a nil interface or a typed nil pointer in one (a nil
// *processor.Stats passed as a Source).
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
}

// Run refreshes consumer lag from Options.Lag until ctx is done: at once, then
// every LagInterval. Without a LagSource it returns nil at once. Run may be
// called once; a second call returns an error.
func (m *Metrics) Run(ctx context.Context) error {
	first := false
	m.runOnce.Do(func() { first = true })
	if !first {
		return errors.New("metrics: Run called twice")
	}
	if m.o.Lag == nil {
		return nil
	}
	t := time.NewTicker(m.o.LagInterval)
	defer t.Stop()
	for {
		m.refreshLag(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// refreshLag replaces the lag values; on failure it keeps the last value of
// every partition it could not load.
func (m *Metrics) refreshLag(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, m.o.LagTimeout)
	defer cancel()
	lag, err := m.o.Lag.Lag(ctx)
	if err != nil && errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return // shutting down
	}
	if err != nil && errors.Is(err, kerr.UnknownTopicOrPartition) {
		// A topic that does not exist yet (a worker waiting for its
		// input, or one just started): no lag to report, and not a
		// failure of the refresh; projector_input_topic_missing says it.
		m.o.Logger.Debug("consumer lag: topic does not exist yet", "err", err)
		return
	}
	m.mu.Lock()
	if err == nil {
		m.lagValues = maps.Clone(lag)
	} else {
		// Partial: update what was loaded, keep the last value of the rest.
		m.lagErrs++
		values := maps.Clone(m.lagValues)
		maps.Copy(values, lag)
		m.lagValues = values
	}
	m.mu.Unlock()
	if err == nil {
		if m.lagFailStreak >= LagWarnAfter {
			m.o.Logger.Info("consumer lag refresh recovered", "failedRefreshes", m.lagFailStreak)
		}
		m.lagFailStreak = 0
		return
	}
	m.lagFailStreak++
	switch {
	case m.lagFailStreak == LagWarnAfter:
		m.o.Logger.Warn("consumer lag refresh keeps failing; projector_consumer_lag shows the last values loaded",
			"failedRefreshes", m.lagFailStreak, "err", err)
	default:
		m.o.Logger.Debug("consumer lag refresh failed", "failedRefreshes", m.lagFailStreak, "err", err)
	}
}

// zeroSource stands in for a missing processor; it is not a loop.
type zeroSource struct{}

func (zeroSource) Events(string, string) int64            { return 0 }
func (zeroSource) DeadLetters(string) int64               { return 0 }
func (zeroSource) Effects(string, string) int64           { return 0 }
func (zeroSource) Transactions(string) int64              { return 0 }
func (zeroSource) Restored() int64                        { return 0 }
func (zeroSource) Ready() bool                            { return false }
func (zeroSource) MissingInputs() []string                { return nil }
func (zeroSource) RestoreRetries() int64                  { return 0 }
func (zeroSource) HeldTransactions() int64                { return 0 }
func (zeroSource) Standby() processor.StandbyStats        { return processor.StandbyStats{} }
func (zeroSource) Assigned() []processor.Partition        { return nil }
func (zeroSource) Gaps() map[string]processor.GapSummary  { return nil }
func (zeroSource) Observe(func(processor.TxnObservation)) {}
