// Package inputformat turns one Kafka record of an input topic's declared
// format into the projector event envelope (docs/contract.md#event-envelope),
// so that the envelope decoder, its rules and the fingerprint stay the one
// place every event goes through.
//
// The formats:
//
//   - envelope: the value is the envelope. Decode passes it through
//     untouched and without allocating; only the trace context is read
//     from the headers.
//   - cloudevents: CloudEvents 1.0 on the Kafka protocol binding, binary
//     mode (ce_ headers, content-type for the data) or structured mode
//     (content-type application/cloudevents+json). Defaults: id → eventId,
//     type → eventType, subject → aggregateId, the sequence extension (a
//     decimal integer) → aggregateVersion, time → occurredAt, data →
//     payload, the tenantid extension → tenantId. The dedup identity is
//     (source, id), as the specification defines uniqueness.
//   - debezium-outbox: as Debezium's Outbox Event Router emits with its
//     defaults: header id → eventId, the key (possibly JSON-quoted) →
//     aggregateId, header eventType → eventType, the value → payload, as a
//     JSON object or as a JSON string holding JSON.
//   - mapped: any JSON object; Options.Fields maps each member to an RFC
//     6901 JSON Pointer into the value, a header or the key.
//
// Every format but envelope also reads values (and keys) framed for a
// Confluent-compatible Schema Registry: they are decoded into JSON first
// (package schemaregistry), so one topic may carry an event as Avro and a
// copy of it as JSON.
//
// Invariants:
//
//   - Decode produces an envelope and lets envelope.DecodeInto judge it:
//     validation and the fingerprint are computed over the mapped, decoded
//     event, in every format, so a re-serialised or re-encoded copy is a
//     duplicate and a changed payload a conflict
//     (docs/design.md#duplicates-absorbed). What Decode checks itself is
//     only what it needs to build JSON and name a bad value's source.
//   - Every record gets a verdict (docs/design.md#nothing-dropped-silently):
//     an envelope, an *envelope.Error whose Reason is the dead-letter reason
//     (invalid:<member>, naming where the member was looked for, or
//     invalid:value, naming the schema id for a registry value that can
//     never decode), or an error wrapping ErrUnavailable when the record
//     might decode later (the registry is down or slow): such a record is
//     never dead-lettered, the partition waits. No input panics Decode.
//   - Decoding is bounded: the value by Options.MaxRecordBytes, documents
//     and decoded values by envelope.MaxDepth, the registry's cache by its
//     size.
//   - The envelope format's records decode exactly as before: same bytes,
//     same errors, same dedup key (Result.DedupEventID returns the eventId
//     unchanged when the format has no id namespace).
//   - A Decoder holds no per-record state and is safe for concurrent use;
//     Result's slices alias the record and the dst buffer given to Decode.
package inputformat
