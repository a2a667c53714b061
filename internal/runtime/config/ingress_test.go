package config

import (
	"strings"
	"testing"
	"time"
)

const ingressBase = `name: ing
kafka: {brokers: embedded, input: [a, b]}
projections:
  - {name: p, topic: p.v1, events: {A: merge}}
`

// TestIngressConfig: absent is off; present takes its defaults; bad values
// are named by key.
func TestIngressConfig(t *testing.T) {
	c, err := Parse([]byte(ingressBase), nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Ingress != nil || c.Ingress.Enabled() {
		t.Fatalf("ingress absent: got %+v", c.Ingress)
	}
	c, err = Parse([]byte(ingressBase+"ingress: {listen: 127.0.0.1:8080}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	in := c.Ingress
	if !in.Enabled() || in.Topic != "a" || in.ReceiptsTopic != "ing.receipts" || in.ClaimsTopic != "ing.claims" || in.Timeout.Std() != 10*time.Second ||
		in.MaxBodyBytes != c.Kafka.MaxRecordBytes || in.MaxBatch != 100 || in.RequireTenant {
		t.Fatalf("ingress defaults: %+v", in)
	}
	c, err = Parse([]byte(ingressBase+"ingress: {listen: \"off\"}\n"), nil)
	if err != nil || c.Ingress == nil || c.Ingress.Enabled() {
		t.Fatalf("listen off: %v %+v", err, c.Ingress)
	}
	for _, tc := range []struct{ yaml, key string }{
		{"ingress: {}", "ingress.listen"},
		{"ingress: {listen: nohost}", "ingress.listen"},
		{"ingress: {listen: 127.0.0.1:9464}", "ingress.listen"}, // the http.listen default
		{"ingress: {listen: 127.0.0.1:8080, topic: c}", "ingress.topic"},
		{"ingress: {listen: 127.0.0.1:8080, receiptsTopic: 'x y'}", "ingress.receiptsTopic"},
		{"ingress: {listen: 127.0.0.1:8080, receiptsTopic: b}", `ingress.receiptsTopic: topic "b" is also an input topic`},
		{"ingress: {listen: 127.0.0.1:8080, receiptsTopic: p.v1}", `ingress.receiptsTopic: topic "p.v1" is already used by projections[0].topic`},
		{"ingress: {listen: 127.0.0.1:8080, receiptsTopic: ing.dlq}", `ingress.receiptsTopic: topic "ing.dlq" is already used by kafka.deadLetterTopic`},
		{"ingress: {listen: 127.0.0.1:8080, claimsTopic: a}", `ingress.claimsTopic: topic "a" is also an input topic`},
		{"ingress: {listen: 127.0.0.1:8080, claimsTopic: ing.receipts}", `ingress.claimsTopic: topic "ing.receipts" is already used by ingress.receiptsTopic`},
		{"ingress: {listen: 127.0.0.1:8080, timeout: -1s}", "ingress.timeout"},
		{"ingress: {listen: 127.0.0.1:8080, maxBatch: 20000}", "ingress.maxBatch"},
		{"ingress: {listen: 127.0.0.1:8080, maxBodyBytes: 1}", "ingress.maxBodyBytes"},
		{"ingress: {listen: 127.0.0.1:8080, tenants: x}", "ingress.tenants"},
	} {
		_, err := Parse([]byte(ingressBase+tc.yaml+"\n"), nil)
		if err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s: got %v, want an error naming %s", tc.yaml, err, tc.key)
		}
	}
}
