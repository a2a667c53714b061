package ingress

import (
	"testing"

	"github.com/projector-dev/projector/internal/core/receipt"
)

// TestResponseBytes pins the bytes of a 200/201 body: the fields of each
// receipt in this order, never its origin (which the body states once).
func TestResponseBytes(t *testing.T) {
	rc := func(i int, reason string) *receipt.Receipt {
		return &receipt.Receipt{
			Origin:  receipt.Origin{TenantID: "acme", Key: "order-42", Index: i, Count: 2, Batch: true},
			EventID: receipt.EventID("acme", "order-42", i), Fingerprint: "ab", Outcome: "applied",
			Projections: map[string]string{"p": "applied"}, Reason: reason, Topic: "in", Partition: 1, Offset: int64(7 + i),
		}
	}
	one := string(responseFor("order-42", "acme", false, []*receipt.Receipt{rc(0, "")}))
	want := `{"idempotencyKey":"order-42","tenantId":"acme","eventId":"` + receipt.EventID("acme", "order-42", 0) +
		`","outcome":"applied","projections":{"p":"applied"},"topic":"in","partition":1,"offset":7,"fingerprint":"ab"}` + "\n"
	if one != want {
		t.Errorf("single body\n got %s\nwant %s", one, want)
	}
	two := string(responseFor("order-42", "", true, []*receipt.Receipt{rc(0, ""), rc(1, "bad")}))
	want = `{"idempotencyKey":"order-42","events":[{"eventId":"` + receipt.EventID("acme", "order-42", 0) +
		`","outcome":"applied","projections":{"p":"applied"},"topic":"in","partition":1,"offset":7,"fingerprint":"ab"},{"eventId":"` +
		receipt.EventID("acme", "order-42", 1) +
		`","outcome":"applied","projections":{"p":"applied"},"reason":"bad","topic":"in","partition":1,"offset":8,"fingerprint":"ab"}]}` + "\n"
	if two != want {
		t.Errorf("batch body\n got %s\nwant %s", two, want)
	}
}
