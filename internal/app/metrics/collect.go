package metrics

import (
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/projector-dev/projector/processor"
)

// collector reads the counters at scrape time.
type collector struct{ m *Metrics }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	m := c.m
	for _, d := range []*prometheus.Desc{m.events, m.gapsOpen, m.gapOldest, m.effects, m.pending, m.txns, m.lag, m.restored, m.dlq, m.ready, m.assigned, m.lagErrors, m.missing, m.restoreRetries, m.held,
		m.standby, m.standbyCaught, m.standbyRecords} {
		ch <- d
	}
}

// Collect emits every series from the counters as they are now; nothing
// here waits on Kafka (scrape-never-waits: lag is the last value Run loaded).
// The series are emitted in a fixed order: processor outcomes, gaps, then
// the loops' sums.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	e := emitter{ch}
	c.collectOutcomes(e)
	c.collectGaps(e)
	c.collectLoops(e)
}

// emitter sends constant metrics on a Collect channel.
type emitter struct{ ch chan<- prometheus.Metric }

func (e emitter) counter(d *prometheus.Desc, v int64, lvs ...string) {
	e.ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lvs...)
}

func (e emitter) gauge(d *prometheus.Desc, v float64, lvs ...string) {
	e.ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lvs...)
}

// flag emits a 0/1 gauge.
func (e emitter) flag(d *prometheus.Desc, on bool, lvs ...string) {
	if on {
		e.gauge(d, 1, lvs...)
	} else {
		e.gauge(d, 0, lvs...)
	}
}

// collectOutcomes emits the processor's per-record series: events by
// projection and outcome, dead letters by reason, side effects by status
// (the processor's enqueues plus the executor's results) and the pending
// effects. Every configured label combination is emitted, at zero if need
// be (series-exist-at-zero).
func (c collector) collectOutcomes(e emitter) {
	m, o, p := c.m, c.m.o, c.m.proc
	for _, out := range o.Outcomes {
		e.counter(m.events, p.Events("", out), RecordLevel, out)
		for _, name := range o.Projections {
			e.counter(m.events, p.Events(name, out), name, out)
		}
	}
	for _, r := range o.DeadLetterReasons {
		e.counter(m.dlq, p.DeadLetters(r), r)
	}
	for _, eff := range o.Effects {
		for _, st := range o.EffectStatuses {
			n := p.Effects(eff, st)
			if o.Executor != nil {
				n += o.Executor.Effects(eff, st)
			}
			e.counter(m.effects, n, eff, st)
		}
	}
	var pending int64
	if o.Pending != nil {
		pending = o.Pending()
	}
	e.gauge(m.pending, float64(pending))
}

// collectGaps emits the open gaps and the age of the oldest per projection:
// the configured projections at 0 unless the processor reports otherwise,
// plus any projection it reports that is not configured.
func (c collector) collectGaps(e emitter) {
	m, o := c.m, c.m.o
	gaps := c.m.proc.Gaps()
	now := o.Now()
	gapNames := slices.Clone(o.Projections)
	for name := range gaps {
		if !slices.Contains(o.Projections, name) {
			gapNames = append(gapNames, name)
		}
	}
	for _, name := range gapNames {
		g := gaps[name]
		age := 0.0
		if g.Open > 0 && !g.Oldest.IsZero() {
			age = max(now.Sub(g.Oldest).Seconds(), 0)
		}
		e.gauge(m.gapsOpen, float64(g.Open), name)
		e.gauge(m.gapOldest, age, name)
	}
}

// collectLoops emits the series the exactly-once loops add up to:
// transactions, restores, per-partition lag of the assigned partitions,
// readiness, lag refresh errors, missing input topics and restore retries.
func (c collector) collectLoops(e emitter) {
	m := c.m
	txns := make([]int64, len(TransactionResults))
	var restored int64
	var assigned []processor.Partition
	ready := len(m.loops) > 0
	for _, l := range m.loops {
		for i, r := range TransactionResults {
			txns[i] += l.Transactions(r)
		}
		restored += l.Restored()
		assigned = append(assigned, l.Assigned()...)
		ready = ready && l.Ready()
	}
	for i, r := range TransactionResults {
		e.counter(m.txns, txns[i], r)
	}
	e.counter(m.restored, restored)

	m.mu.Lock()
	lag := m.lagValues
	lagErrs := m.lagErrs
	m.mu.Unlock()
	seen := make(map[processor.Partition]bool, len(assigned))
	for _, t := range assigned {
		if seen[t] { // two loops never share a topic; be safe anyway
			continue
		}
		seen[t] = true
		e.gauge(m.lag, float64(lag[TopicPartition{t.Topic, t.Partition}]), t.Topic, strconv.Itoa(int(t.Partition)))
	}
	e.gauge(m.assigned, float64(len(seen)))
	e.flag(m.ready, ready)
	e.counter(m.lagErrors, lagErrs)

	missing := map[string]bool{}
	var retries int64
	for _, l := range m.loops {
		for _, t := range l.MissingInputs() {
			missing[t] = true
		}
		retries += l.RestoreRetries()
	}
	for _, t := range m.o.Inputs {
		e.flag(m.missing, missing[t], t)
	}
	e.counter(m.restoreRetries, retries)
	e.counter(m.held, m.proc.HeldTransactions())
	sb := m.proc.Standby()
	e.gauge(m.standby, float64(sb.Partitions))
	e.gauge(m.standbyCaught, float64(sb.CaughtUp))
	e.counter(m.standbyRecords, sb.Records)
}
