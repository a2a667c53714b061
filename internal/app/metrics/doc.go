// Package metrics exposes the committed counters of the processor and the
// side-effect executor, consumer lag, Pebble's health and franz-go client
// metrics as Prometheus metrics on an injected prometheus.Registerer
// (docs/contract.md#metrics). It keeps no globals.
//
// Invariants (named in docs/design.md#invariants):
//
//   - committed-counts-only: one source of truth per number. The counters
//     live in the loops' committed stats (*processor.Stats,
//     *sideeffects.WorkerStats), which publish a transaction's counts only
//     when it commits; the Collector reads them at scrape time and reports
//     them as CounterValue, so a scrape shows exactly the committed counts:
//     nothing processed in an aborted transaction, nothing counted twice.
//     This package counts nothing itself but lag refresh failures, and fills
//     the transaction_seconds histogram from the loops' observers.
//   - series-exist-at-zero: every series of a known label value exists from
//     New on, at 0: every (projection, outcome) for the configured
//     projections plus RecordLevel, every dead-letter reason, every (effect,
//     status) of the configured effects, every transaction result, and a lag
//     series for every assigned partition. Dashboards and alerts see them
//     before the first event.
//   - scrape-never-waits: a scrape never waits on Kafka. Consumer lag is
//     refreshed by Run, in the background, and a scrape reports the last
//     value it got.
//
// Label conventions:
//
//   - projection: the configured projection name, or RecordLevel ("_record")
//     for outcomes of records no projection accepted (processor.Stats counts
//     them under projection ""): invalid records, and duplicates or conflicts
//     detected before any projection matched. Summing over projection gives
//     the number of (record, projection) outcomes; the record-level series
//     alone count records.
//   - outcome: processor.Outcomes (applied, duplicate, stale, held, conflict,
//     invalid, too-large, failed, filtered).
//   - reason: DeadLetterReasons ("invalid:<field>" for every envelope field,
//     conflict, gap-timeout, handler-error, too-large).
//   - effect, status: the configured side effects × EffectStatuses (enqueued,
//     succeeded, failed, unknown, suppressed, duplicate); the value is the
//     processor's count (enqueued, suppressed) plus the executor's (committed
//     ledger transitions into succeeded, failed, unknown; duplicate offers).
//     The executor's other statuses (pending, in-flight, resolved) are not
//     exported unless Options.EffectStatuses lists them.
//   - result: committed, aborted, failed, summed over the loops.
//   - topic, partition: a partition a loop has assigned (the inputs for the
//     processor, the effects topic for the executor); partition in decimal.
//
// projector_transaction_seconds observes committed transactions only (begin
// to commit acknowledged), like processor.Stats.TxnLatency; aborted and failed
// transactions are counted in projector_transactions_total.
package metrics
