package receipt

import (
	"strings"
	"testing"
)

// TestEventID: a pure function of (tenant, key, index), different for any
// change of one of them, and not confusable across the separators.
func TestEventID(t *testing.T) {
	a := EventID("t", "k", 0)
	if a != EventID("t", "k", 0) || !strings.HasPrefix(a, "ik-") || len(a) != 3+32 {
		t.Fatalf("EventID %q", a)
	}
	seen := map[string]string{}
	for _, c := range []struct {
		tenant, key string
		index       int
	}{{"t", "k", 0}, {"t", "k", 1}, {"t2", "k", 0}, {"t", "k2", 0}, {"", "tk", 0}, {"tk", "", 0}, {"t", "k1", 0}, {"t", "k", 10}} {
		id := EventID(c.tenant, c.key, c.index)
		if prev, ok := seen[id]; ok {
			t.Fatalf("%v and %s share %s", c, prev, id)
		}
		seen[id] = c.tenant + "/" + c.key
		k := Key(c.tenant, c.key, c.index)
		if prev, ok := seen[k]; ok {
			t.Fatalf("receipt key %q of %v is also %s", k, c, prev)
		}
		seen[k] = c.tenant + "/" + c.key
	}
}

// TestOriginAndReceipt: the header and the receipt round-trip; malformed
// ones are errors, never a zero value taken for a receipt.
func TestOriginAndReceipt(t *testing.T) {
	if _, err := ParseOrigin([]byte(`{"tenantId":"t","key":"` + strings.Repeat("<", MaxKeyLen) + `","index":0,"count":1}`)); err != nil {
		t.Errorf("a key of MaxKeyLen printable characters: %v", err)
	}
	o, err := ParseOrigin([]byte(`{"tenantId":"t","key":"k","index":1,"count":2,"batch":true}`))
	if err != nil || o != (Origin{TenantID: "t", Key: "k", Index: 1, Count: 2, Batch: true}) {
		t.Fatalf("%+v %v", o, err)
	}
	for _, bad := range []string{``, `{}`, `{"key":"k","index":0,"count":0}`, `{"key":"k","index":2,"count":2}`, `{"key":"k","index":-1,"count":1}`, `{"key":"","index":0,"count":1}`,
		// What the ingress never writes: keys and tenants are 1..MaxKeyLen
		// printable ASCII characters.
		`{"key":"` + strings.Repeat("k", MaxKeyLen+1) + `","index":0,"count":1}`, `{"key":"a\nb","index":0,"count":1}`,
		`{"key":"é","index":0,"count":1}`, `{"key":"<&>","tenantId":"t\u0000","index":0,"count":1}`} {
		if _, err := ParseOrigin([]byte(bad)); err == nil {
			t.Errorf("ParseOrigin(%q): no error", bad)
		}
	}
	r := &Receipt{Origin: o, EventID: EventID("t", "k", 1), Fingerprint: "ab", Topic: "in", Partition: 3, Offset: 9}
	r.Set("p1", "held")
	r.Set("p2", "applied")
	var none *Receipt
	none.Set("p", "applied") // no receipt wanted: ignored
	got, err := Decode(r.Encode())
	if err != nil || got.Outcome != "held" || got.Projections["p2"] != "applied" || got.Offset != 9 || got.Origin != o {
		t.Fatalf("round trip %+v %v", got, err)
	}
	for _, bad := range []string{`x`, `{}`, `{"key":"k","count":0}`} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("Decode(%q): no error", bad)
		}
	}
}
