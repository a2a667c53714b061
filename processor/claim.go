package processor

// The claim stage (docs/decisions/012-ingress-claims.md): the ingress writes
// each HTTP request as one claim to the claims topic, keyed by (tenant,
// Idempotency-Key), which this processor consumes as an internal input. The
// owner of a key's claims partition decides its claims in order, inside its
// transaction: the first wins and is kept in the partition's state for ever;
// in the same transaction its events are forwarded to the ingress topic (by
// aggregate, with their derived ids and the projector-ingress header) and
// its claim receipt is written. A later claim of the key forwards and
// writes nothing: its requester answers from the claim receipt (a replay,
// or 409). So one key is one request, and its events reach the input topic
// once, on one instance or many, whatever the partitions of their
// aggregates.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/command"
	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/inputformat"
	"github.com/projector-dev/projector/internal/core/receipt"
)

// claimKind starts the state key of a decided (tenant, key) in its claims
// task: claimKind and the first 16 bytes of SHA-256(tenant NUL key).
const claimKind = 'c'

// claimVersion starts a decided key's state value, followed by the digest
// of the winner's events (claimDigest) and the winning request's id.
const claimVersion = 1

// claims reports whether this processor decides the ingress's claims.
func (p *Processor) claims() bool { return p.receipts() && p.cfg.ClaimsTopic != "" }

// claimEvent is one event of a claim, validated.
type claimEvent struct {
	value       []byte
	aggregateID string
	fp          [32]byte
}

// decideClaim decides one claim record of a claims task: the first claim of
// its key wins, a later one changes nothing. A malformed claim (not written
// by the ingress) is dead-lettered with the reason.
func (p *Processor) decideClaim(b *eos.Batch, ts *taskState, r *kgo.Record) error {
	c, evs, err := p.parseClaim(r)
	if err != nil {
		reason := command.ReasonInvalidValue
		var ee *envelope.Error
		if errors.As(err, &ee) {
			reason = ee.Reason()
		}
		p.deadLetterRecord(b, ts, r, reason, err.Error())
		return nil
	}
	key := claimStateKey(ts.task.Prefix, c.TenantID, c.Key)
	digest := claimDigest(c.Batch, evs)
	prev, decided, err := b.Txn.Get(key)
	if err != nil {
		return err
	}
	if decided {
		// A retry, another instance's request, or another body under the
		// key: its requester finds the claim receipt written for the
		// winner, and answers 200 or 409 from it.
		replay := len(prev) > 32 && bytes.Equal(prev[1:33], digest[:])
		p.cfg.Logger.Debug("claim of a decided key: nothing forwarded", "key", c.Key, "tenant", c.TenantID,
			"request", c.Request, "replay", replay)
		return nil
	}
	b.Txn.Set(key, append(append([]byte{claimVersion}, digest[:]...), c.Request...))
	won := &receipt.ClaimReceipt{TenantID: c.TenantID, Key: c.Key, Request: c.Request, Count: len(evs), Batch: c.Batch}
	// The winning request's trace context (the ingress put it on the claim
	// record) goes on with each of its events (docs/contract.md#trace-context).
	tc := inputformat.TraceFromHeaders(r.Headers)
	for i, ev := range evs {
		o := receipt.Origin{TenantID: c.TenantID, Key: c.Key, Index: i, Count: len(evs), Batch: c.Batch}.Encode()
		b.Produce(&kgo.Record{Topic: p.cfg.IngressTopic, Key: []byte(ev.aggregateID), Value: ev.value,
			Headers: tc.Headers([]kgo.RecordHeader{{Key: receipt.Header, Value: o}})})
		won.Fingerprints = append(won.Fingerprints, hex.EncodeToString(ev.fp[:]))
	}
	b.Produce(&kgo.Record{Topic: p.cfg.ReceiptsTopic, Key: []byte(receipt.ClaimKey(c.TenantID, c.Key)), Value: won.Encode(),
		Headers: []kgo.RecordHeader{{Key: receipt.ClaimHeader}}})
	return nil
}

// parseClaim decodes a claim record and validates each of its events as
// the processor will (an ingress validated them already): a claim is
// forwarded whole or not at all. The record key must be the claim's
// ClaimKey, or claims of one key could be decided in two partitions.
func (p *Processor) parseClaim(r *kgo.Record) (*receipt.Claim, []claimEvent, error) {
	c, err := receipt.DecodeClaim(r.Value)
	if err != nil {
		return nil, nil, fmt.Errorf("claim: %w", err)
	}
	if string(r.Key) != receipt.ClaimKey(c.TenantID, c.Key) {
		return nil, nil, fmt.Errorf("claim: record key %q is not the claim's tenant and key", r.Key)
	}
	evs := make([]claimEvent, len(c.Events))
	for i, v := range c.Events {
		var ev envelope.Event
		fp, err := envelope.DecodeFingerprint(v, p.cfg.MaxRecordBytes, &ev) // one walk for both
		if err != nil {
			return nil, nil, fmt.Errorf("claim: event %d: %w", i, err)
		}
		if ev.EventID != receipt.EventID(c.TenantID, c.Key, i) || ev.TenantID != c.TenantID {
			return nil, nil, &envelope.Error{Field: "eventId", Msg: fmt.Sprintf("claim: event %d: eventId and tenantId must be derived from the claim's tenant and key", i)}
		}
		evs[i] = claimEvent{value: v, aggregateID: ev.AggregateID, fp: fp}
	}
	return c, evs, nil
}

// claimStateKey is the state key of (tenant, key) in the claims task with
// the given prefix.
func claimStateKey(prefix []byte, tenant, key string) []byte {
	h := sha256.New()
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return append(append(append([]byte(nil), prefix...), claimKind), h.Sum(nil)[:16]...)
}

// claimDigest identifies a request's payload: its shape and every event's
// fingerprint, in order.
func claimDigest(batch bool, evs []claimEvent) [32]byte {
	h := sha256.New()
	fmt.Fprintf(h, "%t %d", batch, len(evs))
	for _, ev := range evs {
		h.Write(ev.fp[:])
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}
