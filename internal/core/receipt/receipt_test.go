package receipt

import (
	"encoding/json"
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

// TestEncodingKeepsHTML: the receipt and the ingress header write a tenant
// and a key with <, > and & as they are (printable ASCII, so the ingress
// takes them), and read back the same; a header whose key or tenant is
// longer than the ingress allows is malformed (its receipt, which repeats
// both, could outgrow the record limit).
func TestEncodingKeepsHTML(t *testing.T) {
	o := Origin{TenantID: "<t&>", Key: `k<"&">`, Index: 0, Count: 1}
	h := o.Encode()
	if strings.Contains(string(h), `\u00`) || !strings.Contains(string(h), `"tenantId":"<t&>","key":"k<\"&\">"`) {
		t.Errorf("header %s: want <, > and & literal", h)
	}
	if got, err := ParseOrigin(h); err != nil || got != o {
		t.Errorf("header round trip: %+v %v", got, err)
	}
	r := &Receipt{Origin: o, EventID: EventID(o.TenantID, o.Key, 0), Reason: "invalid:<x>", Topic: "in", Fingerprint: "ab"}
	r.Set("p<1>", "applied")
	v := r.Encode()
	if strings.Contains(string(v), `\u00`) || !strings.Contains(string(v), `"projections":{"p<1>":"applied"},"reason":"invalid:<x>"`) {
		t.Errorf("receipt %s: want <, > and & literal", v)
	}
	if got, err := Decode(v); err != nil || got.Origin != o || got.Projections["p<1>"] != "applied" || got.Reason != r.Reason {
		t.Errorf("receipt round trip: %+v %v", got, err)
	}
	long := strings.Repeat("k", MaxKeyLen+1)
	for _, bad := range []Origin{{Key: long, Count: 1}, {TenantID: long, Key: "k", Count: 1}} {
		if _, err := ParseOrigin(bad.Encode()); err == nil {
			t.Errorf("ParseOrigin took a %d-byte key or tenant", len(long))
		}
	}
	if _, err := ParseOrigin(Origin{TenantID: long[1:], Key: long[1:], Count: 1}.Encode()); err != nil {
		t.Errorf("ParseOrigin refused a key and tenant of MaxKeyLen: %v", err)
	}
}

// TestClaimRoundTrip: a claim's tenant and key survive any printable
// characters, its events keep their bytes, and malformed claims and claim
// receipts are errors.
func TestClaimRoundTrip(t *testing.T) {
	evs := []json.RawMessage{[]byte(`{"a": 1,  "b":"<&>"}`), []byte(`{"c":[1, 2]}`)}
	c := &Claim{TenantID: `t"\ <x>`, Key: `k/\"`, Request: "r", Batch: true, Events: evs}
	got, err := DecodeClaim(AppendClaim(nil, c))
	if err != nil || got.TenantID != c.TenantID || got.Key != c.Key || got.Request != "r" || !got.Batch ||
		len(got.Events) != 2 || string(got.Events[0]) != string(evs[0]) || string(got.Events[1]) != string(evs[1]) {
		t.Fatalf("round trip %+v %v", got, err)
	}
	if k := ClaimKey("t", "k"); strings.Count(k, "\n") != 1 || k == Key("t", "k", 0) {
		t.Fatalf("ClaimKey %q", k)
	}
	for _, bad := range []string{`x`, `{}`, `{"key":"k","request":"r","events":[]}`, `{"key":"k","events":[{}]}`,
		`{"key":"k","request":"r","events":[{},{}]}`} {
		if _, err := DecodeClaim([]byte(bad)); err == nil {
			t.Errorf("DecodeClaim(%q): no error", bad)
		}
	}
	cr := &ClaimReceipt{Key: "k", Request: "r", Count: 1, Fingerprints: []string{"ab"}}
	if got, err := DecodeClaimReceipt(cr.Encode()); err != nil || got.Request != "r" || got.Fingerprints[0] != "ab" {
		t.Fatalf("claim receipt round trip %+v %v", got, err)
	}
	for _, bad := range []string{`{}`, `{"key":"k","request":"r","count":2,"fingerprints":["ab"]}`, `{"key":"k","count":1,"fingerprints":["ab"]}`} {
		if _, err := DecodeClaimReceipt([]byte(bad)); err == nil {
			t.Errorf("DecodeClaimReceipt(%q): no error", bad)
		}
	}
}
