package receipt

// Claims: how one (tenant, Idempotency-Key) becomes one request, decided in
// one partition (docs/decisions/012-ingress-claims.md).

import (
	"encoding/json"
	"errors"

	"github.com/projector-dev/projector/internal/core/jsonenc"
)

// ClaimHeader, with an empty value, marks a receipts-topic record whose
// value is a ClaimReceipt rather than a Receipt.
const ClaimHeader = "projector-claim"

// ClaimKey is the key of a request's claim: its claims-topic record key,
// so that every claim of one (tenant, key) lands in one partition, and its
// claim receipt's receipts-topic key. It has one newline, an event's Key
// two, so the two never meet under compaction.
func ClaimKey(tenant, key string) string { return tenant + "\n" + key }

// Claim is an HTTP request as the ingress writes it to the claims topic: all
// its events in one record, keyed by ClaimKey. Request is random per HTTP
// request, so that the claim receipt can name the one that won.
type Claim struct {
	TenantID string `json:"tenantId,omitempty"`
	Key      string `json:"key"`
	Request  string `json:"request"`
	Batch    bool   `json:"batch,omitempty"` // {"events":[…]} rather than one envelope
	// Events are the envelopes as they are forwarded to the input topic
	// (derived eventId and the tenant added), byte for byte.
	Events []json.RawMessage `json:"events"`
}

// AppendClaim appends c's record value to dst. The events are copied as
// they are: they are JSON objects already, and their bytes are what the
// input topic gets.
func AppendClaim(dst []byte, c *Claim) []byte {
	dst = append(dst, '{')
	if c.TenantID != "" {
		dst = jsonenc.AppendString(append(dst, `"tenantId":`...), c.TenantID)
		dst = append(dst, ',')
	}
	dst = jsonenc.AppendString(append(dst, `"key":`...), c.Key)
	dst = jsonenc.AppendString(append(dst, `,"request":`...), c.Request)
	if c.Batch {
		dst = append(dst, `,"batch":true`...)
	}
	dst = append(dst, `,"events":[`...)
	for i, ev := range c.Events {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, ev...)
	}
	return append(dst, "]}"...)
}

// DecodeClaim parses a claims-topic record value.
func DecodeClaim(v []byte) (*Claim, error) {
	c := new(Claim)
	if err := json.Unmarshal(v, c); err != nil {
		return nil, err
	}
	if c.Key == "" || c.Request == "" || len(c.Events) == 0 || (!c.Batch && len(c.Events) != 1) {
		return nil, errors.New("receipt: malformed claim")
	}
	return c, nil
}

// ClaimReceipt is the committed decision of a (tenant, key): the first claim
// of it, which won. The processor writes it once, in the transaction that
// forwards the winner's events; a later claim of the key writes nothing.
type ClaimReceipt struct {
	TenantID string `json:"tenantId,omitempty"`
	Key      string `json:"key"`
	// Request is the winning claim's Request: the one HTTP request that
	// may be answered 201.
	Request string `json:"request"`
	Count   int    `json:"count"`
	Batch   bool   `json:"batch,omitempty"`
	// Fingerprints are the winner's events' fingerprints (hex, in order):
	// a request with other ones is a conflict.
	Fingerprints []string `json:"fingerprints"`
}

// Encode is the claim receipt's record value.
func (c *ClaimReceipt) Encode() []byte {
	b, _ := jsonenc.Marshal(c) // strings, an int and a bool: cannot fail
	return b
}

// DecodeClaimReceipt parses a claim receipt value.
func DecodeClaimReceipt(v []byte) (*ClaimReceipt, error) {
	c := new(ClaimReceipt)
	if err := json.Unmarshal(v, c); err != nil {
		return nil, err
	}
	if c.Key == "" || c.Request == "" || c.Count < 1 || len(c.Fingerprints) != c.Count {
		return nil, errors.New("receipt: malformed claim receipt")
	}
	return c, nil
}
