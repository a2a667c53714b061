package eos

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/state"
)

// Dead-letter headers (docs/contract.md#dead-letter-topic).
const (
	HeaderReason = "projector-reason"
	HeaderError  = "projector-error"
	HeaderSource = "projector-source"
)

// MaxDeadLetterBytes bounds the original key and value copied into a dead
// letter: a record the broker accepted on the input may exceed what it (or the
// producer) accepts on the dead-letter topic, and a dead letter that cannot be
// produced would jam its partition. Larger originals are truncated, and the
// header projector-original-bytes gives their size; projector-source still
// locates the whole record.
const MaxDeadLetterBytes = 512 << 10

// MaxBatchBytes is the producer batch limit (and created topics'
// max.message.bytes) for records of at most maxRecord bytes: room for the
// record, its headers (bounded by MaxHeaderBytes), a dead letter's
// truncated original (MaxDeadLetterBytes) and the batch overhead.
func MaxBatchBytes(maxRecord int) int {
	return max(maxRecord, MaxDeadLetterBytes) + 16<<10
}

// RecordOverhead is what a record adds to its key and value in a batch
// (length varints, attributes, deltas, header count): an upper bound, for
// checks of a record against the limit before it is produced.
const RecordOverhead = 64

// MaxHeaderBytes bounds every header value the worker writes: a longer one
// is cut to this size, ending in TruncatedMark.
const MaxHeaderBytes = 1 << 10

// TruncatedMark ends a header value cut to MaxHeaderBytes.
const TruncatedMark = "…[truncated]"

// HeaderValue is s as a header value, bounded to MaxHeaderBytes.
func HeaderValue(s string) []byte {
	if len(s) <= MaxHeaderBytes {
		return []byte(s)
	}
	return append(Truncate([]byte(s), MaxHeaderBytes-len(TruncatedMark)), TruncatedMark...)
}

// Truncate returns b cut to at most n bytes (a copy when cut), not splitting
// a UTF-8 sequence.
func Truncate(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	for n > 0 && n < len(b) && b[n]&0xC0 == 0x80 {
		n--
	}
	return append([]byte(nil), b[:n]...)
}

// HeaderOriginalBytes is set on a dead letter whose original was truncated.
const HeaderOriginalBytes = "projector-original-bytes"

// DeadLetter produces the original record to the dead-letter topic with the
// reason headers.
func (b *Batch) DeadLetter(id state.Task, offset int64, key, value []byte, reason, msg string) {
	b.DeadLetterWithHeaders(id, offset, key, value, nil, reason, msg)
}

// HeaderHeadersDropped is set on a dead letter that left out original
// headers (more than MaxDeadLetterHeaderBytes): how many.
const HeaderHeadersDropped = "projector-original-headers-dropped"

// MaxDeadLetterHeaderBytes bounds the original headers a dead letter keeps,
// keys and values together: within the room MaxBatchBytes leaves beside the
// original key and value (MaxDeadLetterBytes) for headers.
const MaxDeadLetterHeaderBytes = 8 << 10

// headerOverhead bounds what a header adds to its key and value in a record
// (two length varints).
const headerOverhead = 10

// DeadLetterWithHeaders is DeadLetter keeping the original record's
// headers, before the reason headers: a record whose attributes travel in
// headers (a binary-mode CloudEvent's ce_ headers, Debezium's id and type)
// can be read and replayed from its dead letter. Original headers named as
// the dead letter's own are left out (a reader takes the reason headers
// unambiguously), and so are those past MaxDeadLetterHeaderBytes
// (HeaderHeadersDropped counts them).
func (b *Batch) DeadLetterWithHeaders(id state.Task, offset int64, key, value []byte, original []kgo.RecordHeader, reason, msg string) {
	r := &kgo.Record{Topic: b.tx.dlq, Key: key, Value: value}
	room, dropped := MaxDeadLetterHeaderBytes, 0
	for _, h := range original {
		switch h.Key {
		case HeaderReason, HeaderError, HeaderSource, HeaderOriginalBytes, HeaderHeadersDropped:
			continue
		}
		if n := len(h.Key) + len(h.Value) + headerOverhead; n <= room {
			r.Headers = append(r.Headers, h)
			room -= n
		} else {
			dropped++
		}
	}
	r.Headers = append(r.Headers,
		kgo.RecordHeader{Key: HeaderReason, Value: HeaderValue(reason)},
		kgo.RecordHeader{Key: HeaderError, Value: HeaderValue(msg)},
		kgo.RecordHeader{Key: HeaderSource, Value: HeaderValue(id.Topic + "/" + strconv.Itoa(int(id.Partition)) + "/" + strconv.FormatInt(offset, 10))},
	)
	if dropped > 0 {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderHeadersDropped, Value: []byte(strconv.Itoa(dropped))})
	}
	if len(key)+len(value) > MaxDeadLetterBytes {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: HeaderOriginalBytes,
			Value: []byte(strconv.Itoa(len(key)) + "/" + strconv.Itoa(len(value)))})
		if len(key) > MaxDeadLetterBytes/4 {
			r.Key = key[:MaxDeadLetterBytes/4]
		}
		if len(value) > MaxDeadLetterBytes-len(r.Key) {
			r.Value = value[:MaxDeadLetterBytes-len(r.Key)]
		}
	}
	b.tx.produce(r)
}
