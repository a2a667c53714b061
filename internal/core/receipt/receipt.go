// Package receipt is the record format shared by the HTTP ingress (which
// writes claims and reads the receipts) and the processor (which decides
// claims, forwards the winners' events to the input topic and writes one
// receipt per ingested event inside the transaction that processes it).
//
// Invariants:
//
//   - One (tenant, Idempotency-Key), one request: every HTTP request is one
//     Claim record keyed by ClaimKey, so all claims of a key meet in one
//     claims partition, whose owner decides them in order: the first wins
//     for ever (kept in the partition's state), and only its events reach
//     the input topic, in the transaction that writes its ClaimReceipt.
//     A later claim writes nothing (docs/decisions/012-ingress-claims.md).
//   - An input record that came through the ingress carries the header
//     Header, whose value is the JSON of Origin: the tenant, the
//     Idempotency-Key, the event's index in its request and the request's
//     event count. Nothing else about the record differs from any other
//     input record.
//   - A receipt is keyed by Key(tenant, key, index), so a compacted receipts
//     topic keeps one receipt per ingested event for ever (nothing deletes
//     them): a receipt outlives the dedup retention of its event id.
//   - The processor writes a receipt only when the event id is new to its
//     dedup store (or the record is invalid): a duplicate or a conflict
//     never overwrites the first committed receipt, so a receipt always
//     holds the fingerprint of the first committed payload.
//   - EventID is a pure function of (tenant, key, index), so an event
//     forwarded twice (a producer copying it) is a duplicate to the
//     processor's dedup.
package receipt

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"

	"github.com/projector-dev/projector/internal/core/jsonenc"
)

// Header marks an input record written by the ingress; its value is the
// JSON of Origin.
const Header = "projector-ingress"

// Origin is the value of Header: where in which request an event came from.
type Origin struct {
	TenantID string `json:"tenantId,omitempty"`
	Key      string `json:"key"`
	Index    int    `json:"index"`
	Count    int    `json:"count"`
	Batch    bool   `json:"batch,omitempty"` // {"events":[…]} rather than one envelope
}

// MaxKeyLen bounds an Idempotency-Key and a tenant (bytes, all printable
// ASCII): what the ingress accepts, and so what a Header it wrote holds.
const MaxKeyLen = 255

// Printable reports whether s is 1..MaxKeyLen printable ASCII characters
// (space to tilde): what a header carries safely, and what keeps the
// receipt key's newline separators unambiguous.
func Printable(s string) bool {
	if len(s) == 0 || len(s) > MaxKeyLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Encode is the Header value of o (HTML not escaped: jsonenc).
func (o Origin) Encode() []byte {
	b, _ := jsonenc.Marshal(o) // strings, ints and a bool: cannot fail
	return b
}

// ParseOrigin decodes a Header value, and refuses one the ingress never
// writes: a key or tenant that is not Printable, an index outside the
// count. So the receipt of any record that passes is small (a forged
// header with a huge key would make a receipt too large to produce, and
// stop the processor: TestForgedIngressHeaderNeverStopsTheWorker).
func ParseOrigin(v []byte) (Origin, error) {
	var o Origin
	if err := json.Unmarshal(v, &o); err != nil {
		return o, err
	}
	if !Printable(o.Key) || (o.TenantID != "" && !Printable(o.TenantID)) || o.Index < 0 || o.Count < 1 || o.Index >= o.Count {
		return o, errors.New("receipt: malformed " + Header + " header")
	}
	return o, nil
}

// Key is the receipts-topic key of one event of a request. Tenants and keys
// are printable ASCII (ParseOrigin), so the newline separators cannot be
// forged.
func Key(tenant, key string, index int) string {
	return tenant + "\n" + key + "\n" + strconv.Itoa(index)
}

// EventID derives the event id of the index-th event of a request from the
// tenant and the Idempotency-Key: "ik-" and 32 hex digits of
// SHA-256(tenant NUL key NUL index).
func EventID(tenant, key string, index int) string {
	h := sha256.New()
	h.Write([]byte(tenant))
	h.Write([]byte{0})
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(index)))
	return "ik-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// Receipt is the committed outcome of one ingested event, the value of a
// receipts-topic record. Its fields after Origin, in this order, are also
// what an ingress response shows of the event.
type Receipt struct {
	Origin
	EventID string `json:"eventId"`
	// Outcome is the event's outcome: the first matching projection's
	// (applied, held, stale, too-large, failed), or invalid, or filtered
	// when no projection takes its aggregate type.
	Outcome string `json:"outcome"`
	// Projections holds every matching projection's outcome.
	Projections map[string]string `json:"projections,omitempty"`
	// Reason says why an invalid event is invalid.
	Reason    string `json:"reason,omitempty"`
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	// Fingerprint is the hex SHA-256 of the event's RFC 8785 form
	// (docs/contract.md#dedup-scope-and-fingerprint).
	Fingerprint string `json:"fingerprint"`
}

// Encode is the receipt's record value (HTML not escaped: jsonenc).
func (r *Receipt) Encode() []byte {
	b, _ := jsonenc.Marshal(r) // plain strings, ints and a string map: cannot fail
	return b
}

// Decode parses a receipt value.
func Decode(v []byte) (*Receipt, error) {
	r := new(Receipt)
	if err := json.Unmarshal(v, r); err != nil {
		return nil, err
	}
	if r.Key == "" || r.Count < 1 {
		return nil, errors.New("receipt: malformed receipt")
	}
	return r, nil
}

// Set records a projection's outcome; the first one set (configuration
// order) is the Outcome. A nil receipt (none wanted) ignores it, so the
// processor's hot path needs no branch.
func (r *Receipt) Set(projection, outcome string) {
	if r == nil {
		return
	}
	if r.Projections == nil {
		r.Projections = map[string]string{}
	}
	r.Projections[projection] = outcome
	if r.Outcome == "" {
		r.Outcome = outcome
	}
}
