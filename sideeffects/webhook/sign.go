package webhook

// Signed calls: the Standard Webhooks specification's symmetric scheme
// (https://www.standardwebhooks.com/, spec/standard-webhooks.md, "Signature
// scheme" and "Webhook headers"), so that a receiver can tell projector from
// anyone else with any Standard Webhooks library
// (docs/contract.md#side-effect-webhook).

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The Standard Webhooks headers every signed call carries.
const (
	HeaderID        = "webhook-id"        // the message id: the idempotency key (MessageID)
	HeaderTimestamp = "webhook-timestamp" // Unix seconds when the attempt was sent
	HeaderSignature = "webhook-signature" // "v1,<base64>" per secret, space-separated
)

// Signer signs calls with one key or several: one v1 signature per key, so
// that a receiver holding any one of them verifies the call (a secret is
// rotated by signing with the new and the old until every receiver has the
// new one). It is immutable and safe for concurrent use.
type Signer struct {
	keys [][]byte
}

// NewSigner returns the signer of the secrets (whsec_ + base64 of a 24 to
// 64 byte key: SigningSecret.Key). The error never contains a secret.
func NewSigner(secrets SigningSecrets) (*Signer, error) {
	if len(secrets) == 0 {
		return nil, fmt.Errorf("sideeffects: webhook: no signing secret")
	}
	s := &Signer{}
	for i, sec := range secrets {
		key, err := sec.Key()
		if err != nil {
			return nil, fmt.Errorf("sideeffects: webhook: signing secret %d: %w", i, err)
		}
		s.keys = append(s.keys, key)
	}
	return s, nil
}

// Sign returns the webhook-signature value of a message: for each key,
// "v1," and the base64 of HMAC-SHA256 over "id.timestamp.body", joined by
// spaces. body must be exactly the bytes sent.
func (s *Signer) Sign(id string, timestamp int64, body []byte) string {
	ts := strconv.FormatInt(timestamp, 10)
	var b strings.Builder
	for i, key := range s.keys {
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(id))
		mac.Write([]byte{'.'})
		mac.Write([]byte(ts))
		mac.Write([]byte{'.'})
		mac.Write(body)
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("v1,")
		b.WriteString(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return b.String()
}

// sign sets the three headers of one attempt, sent at now.
func (s *Signer) sign(h http.Header, key string, now time.Time, body []byte) {
	id, ts := MessageID(key), now.Unix()
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderSignature, s.Sign(id, ts, body))
}

// MessageID is the webhook-id of a call: the idempotency key, with "%" and
// "." percent-encoded (%25, %2E). The specification forbids a "." in the id:
// the signed content is "id.timestamp.body", and a "." in a key (which an
// event's fields can put there) would let one signed message pass for
// another with a different timestamp. A key without either character, the
// usual case, is its own webhook-id; the mapping is one-to-one, so the id
// stays a stable idempotency key across retries.
func MessageID(key string) string {
	if !strings.ContainsAny(key, "%.") {
		return key
	}
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		switch c := key[i]; c {
		case '%':
			b.WriteString("%25")
		case '.':
			b.WriteString("%2E")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
