package envelope

import (
	"encoding/hex"
	"encoding/json"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gowebpki/jcs"
)

func mustDecode(t testing.TB, in string) *Event {
	t.Helper()
	ev, err := Decode([]byte(in), 0)
	if err != nil {
		t.Fatalf("Decode(%.100q): %v", in, err)
	}
	return ev
}

const fpBase = `{"eventId":"e-1","eventType":"CaseEscalated","aggregateId":"CASE-1","aggregateType":"RegulatoryCase",` +
	`"aggregateVersion":42,"tenantId":"acme","occurredAt":"2026-06-28T10:15:30Z",` +
	`"payload":{"status":"ESCALATED","level":2,"ratio":0.5,"big":1e21,"tags":["sla","p1"],` +
	`"assignee":{"team":"compliance","id":"u-9","history":[{"at":1,"ok":true},{"at":2,"ok":false}]},"note":null}}`

// Re-serialised copies of fpBase: same intent, so the same fingerprint.
var fpSame = map[string]string{
	"reordered top level": `{"payload":{"status":"ESCALATED","level":2,"ratio":0.5,"big":1e21,"tags":["sla","p1"],` +
		`"assignee":{"team":"compliance","id":"u-9","history":[{"at":1,"ok":true},{"at":2,"ok":false}]},"note":null},` +
		`"tenantId":"acme","aggregateVersion":42,"aggregateType":"RegulatoryCase","aggregateId":"CASE-1","eventType":"CaseEscalated","eventId":"e-1"}`,
	"whitespace everywhere": " {\n  \"eventId\" : \"e-1\" ,\n  \"eventType\":\"CaseEscalated\",\t\"aggregateId\":\"CASE-1\",\r\n" +
		` "aggregateType":"RegulatoryCase", "aggregateVersion": 42, "tenantId": "acme", "occurredAt":"2026-06-28T10:15:30Z",` +
		"\n \"payload\" : { \"status\" : \"ESCALATED\" , \"level\" : 2 , \"ratio\" : 0.5 , \"big\" : 1e21 , \"tags\" : [ \"sla\" , \"p1\" ] ,\n" +
		` "assignee" : { "team" : "compliance" , "id" : "u-9" , "history" : [ { "at" : 1 , "ok" : true } , { "at" : 2 , "ok" : false } ] } , "note" : null }` + " }\n",
	"escapes for plain characters": `{"eventId":"e-1","eventType":"Case\u0045scalated","aggregateId":"\u0043ASE-1","aggregateType":"Regulatory\u0043ase",` +
		`"aggregateVersion":42,"tenantId":"\u0061cme","occurredAt":"2026-06-28T10:15:30Z",` +
		`"payload":{"st\u0061tus":"ESCAL\u0041TED","level":2,"ratio":0.5,"big":1e21,"tags":["sl\u0061","p\u0031"],` +
		`"\u0061ssignee":{"team":"compliance","id":"u\u002d9","history":[{"\u0061t":1,"ok":true},{"at":2,"ok":false}]},"note":null}}`,
	"escaped solidus and member names": `{"e\u0076entId":"e-1","eventTyp\u0065":"CaseEscalated","aggregateId":"CASE-1","aggregateType":"RegulatoryCase",` +
		`"aggregateVersion":42,"tenantId":"acme",` +
		`"payload":{"status":"ESCALATED","level":2,"ratio":0.5,"big":1e21,"tags":["sla","p1"],` +
		`"assignee":{"team":"compliance","id":"u-9","history":[{"at":1,"ok":true},{"at":2,"ok":false}]},"note":null}}`,
	"number spellings": `{"eventId":"e-1","eventType":"CaseEscalated","aggregateId":"CASE-1","aggregateType":"RegulatoryCase",` +
		`"aggregateVersion":4.2e1,"tenantId":"acme","occurredAt":"2026-06-28T10:15:30Z",` +
		`"payload":{"status":"ESCALATED","level":2.0,"ratio":5E-1,"big":1000000000000000000000,"tags":["sla","p1"],` +
		`"assignee":{"team":"compliance","id":"u-9","history":[{"at":1.00,"ok":true},{"at":0.2e1,"ok":false}]},"note":null}}`,
	"nested objects reordered": `{"eventId":"e-1","eventType":"CaseEscalated","aggregateId":"CASE-1","aggregateType":"RegulatoryCase",` +
		`"aggregateVersion":42,"tenantId":"acme","occurredAt":"2026-06-28T10:15:30Z",` +
		`"payload":{"note":null,"assignee":{"history":[{"ok":true,"at":1},{"ok":false,"at":2}],"id":"u-9","team":"compliance"},` +
		`"tags":["sla","p1"],"big":1e21,"ratio":0.5,"level":2,"status":"ESCALATED"}}`,
	"non-intent fields differ": `{"eventId":"OTHER","eventType":"CaseEscalated","aggregateId":"CASE-1","aggregateType":"RegulatoryCase",` +
		`"aggregateVersion":42,"tenantId":"acme","occurredAt":"2020-01-01T00:00:00Z","correlationId":"c","causationId":"x","producer":"p",` +
		`"unknown":{"z":[1,2,3]},` +
		`"payload":{"status":"ESCALATED","level":2,"ratio":0.5,"big":1e21,"tags":["sla","p1"],` +
		`"assignee":{"team":"compliance","id":"u-9","history":[{"at":1,"ok":true},{"at":2,"ok":false}]},"note":null}}`,
}

// replace returns fpBase with one textual change, checking it applied.
func replace(t *testing.T, old, new string) string {
	t.Helper()
	if strings.Count(fpBase, old) != 1 {
		t.Fatalf("%q does not occur exactly once in fpBase", old)
	}
	return strings.Replace(fpBase, old, new, 1)
}

func TestFingerprintStable(t *testing.T) {
	want := mustDecode(t, fpBase).Fingerprint()
	wantCanon := string(mustDecode(t, fpBase).AppendCanonical(nil))
	for name, in := range fpSame {
		ev := mustDecode(t, in)
		if got := ev.Fingerprint(); got != want {
			t.Errorf("%s: fingerprint differs\n got canonical  %s\n want canonical %s", name, ev.AppendCanonical(nil), wantCanon)
		}
	}
	// Absent, null and (for tenantId/aggregateType) empty are the same.
	a := mustDecode(t, base()).Fingerprint()
	for _, in := range []string{
		base(`"tenantId":null`), base(`"tenantId":""`), base(`"aggregateType":null`), base(`"aggregateType":""`),
		base(`"aggregateVersion":null`),
	} {
		if mustDecode(t, in).Fingerprint() != a {
			t.Errorf("%s: fingerprint differs from the absent form", in)
		}
	}
	// Repeated calls and pooled scratch reuse do not change the result.
	ev := mustDecode(t, fpBase)
	for i := 0; i < 3; i++ {
		mustDecode(t, base(`"payload":{"z":[{"y":1,"x":2}],"a":"\u00e9"}`)).Fingerprint()
		if ev.Fingerprint() != want {
			t.Fatal("fingerprint not repeatable")
		}
	}
}

func TestFingerprintChanges(t *testing.T) {
	want := mustDecode(t, fpBase).Fingerprint()
	changes := map[string]string{
		"eventType":                 replace(t, `"eventType":"CaseEscalated"`, `"eventType":"CaseClosed"`),
		"eventType case":            replace(t, `"eventType":"CaseEscalated"`, `"eventType":"caseEscalated"`),
		"aggregateType":             replace(t, `"aggregateType":"RegulatoryCase"`, `"aggregateType":"Other"`),
		"aggregateType removed":     replace(t, `"aggregateType":"RegulatoryCase",`, ``),
		"aggregateId":               replace(t, `"aggregateId":"CASE-1"`, `"aggregateId":"CASE-2"`),
		"aggregateVersion":          replace(t, `"aggregateVersion":42`, `"aggregateVersion":43`),
		"aggregateVersion removed":  replace(t, `"aggregateVersion":42,`, ``),
		"tenantId":                  replace(t, `"tenantId":"acme"`, `"tenantId":"acme2"`),
		"tenantId removed":          replace(t, `"tenantId":"acme",`, ``),
		"payload string value":      replace(t, `"ESCALATED"`, `"ESCALATEd"`),
		"payload number value":      replace(t, `"level":2`, `"level":3`),
		"payload number vs string":  replace(t, `"level":2`, `"level":"2"`),
		"payload fraction":          replace(t, `"ratio":0.5`, `"ratio":0.50000000001`),
		"payload nested value":      replace(t, `"ok":false`, `"ok":true`),
		"payload null vs false":     replace(t, `"note":null`, `"note":false`),
		"payload member removed":    replace(t, `,"note":null`, ``),
		"payload member renamed":    replace(t, `"note":null`, `"Note":null`),
		"payload array order":       replace(t, `["sla","p1"]`, `["p1","sla"]`),
		"payload array element":     replace(t, `["sla","p1"]`, `["sla","p1",null]`),
		"payload nested array item": replace(t, `{"at":2,"ok":false}`, `{"at":2,"ok":false,"x":0}`),
		"payload whitespace in str": replace(t, `"u-9"`, `"u-9 "`),
		"payload escape meaning":    replace(t, `"u-9"`, `"u\n9"`),
		"payload null":              fpBase[:strings.Index(fpBase, `"payload":`)] + `"payload":null}`,
		"payload empty object":      fpBase[:strings.Index(fpBase, `"payload":`)] + `"payload":{}}`,
		"payload absent":            fpBase[:strings.Index(fpBase, `,"payload":`)] + `}`,
	}
	seen := map[[32]byte]string{}
	for name, in := range changes {
		got := mustDecode(t, in).Fingerprint()
		if got == want {
			t.Errorf("%s: fingerprint unchanged", name)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("%s and %s have the same fingerprint", name, other)
		}
		seen[got] = name
	}
	// A field value moving between intent fields must not collide.
	x := mustDecode(t, env(mID, `"eventType":"T"`, `"aggregateId":"A"`, `"tenantId":"B"`)).Fingerprint()
	y := mustDecode(t, env(mID, `"eventType":"T"`, `"aggregateId":"B"`, `"tenantId":"A"`)).Fingerprint()
	if x == y {
		t.Error("swapping aggregateId and tenantId kept the fingerprint")
	}
}

func TestFingerprintIsSHA256OfCanonical(t *testing.T) {
	ev := mustDecode(t, base())
	// sha256 of {"aggregateId":"CASE-1","eventType":"CaseOpened"}, computed with sha256sum.
	canon := string(ev.AppendCanonical(nil))
	if canon != `{"aggregateId":"CASE-1","eventType":"CaseOpened"}` {
		t.Fatalf("canonical = %s", canon)
	}
	fp := ev.Fingerprint()
	if got := hex.EncodeToString(fp[:]); got != "2fb4b5a06ace7c49f019d6512b71a91e8837950873edf7f989676c93c287e284" {
		t.Errorf("fingerprint = %s", got)
	}
}

func TestAppendCanonical(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"all intent fields, non-intent dropped", `{"tenantId":"t","payload":{"b":1,"a":[true,false,null]},"eventId":"e","eventType":"T",` +
			`"aggregateId":"A","aggregateType":"AT","aggregateVersion":7,"correlationId":"c","producer":"p","occurredAt":"2026-01-01T00:00:00Z"}`,
			`{"aggregateId":"A","aggregateType":"AT","aggregateVersion":7,"eventType":"T","payload":{"a":[true,false,null],"b":1},"tenantId":"t"}`},
		{"null payload kept", `{"eventId":"e","eventType":"T","aggregateId":"A","payload":null}`,
			`{"aggregateId":"A","eventType":"T","payload":null}`},
		{"version in exponent form is an integer", `{"eventId":"e","eventType":"T","aggregateId":"A","aggregateVersion":1e3}`,
			`{"aggregateId":"A","aggregateVersion":1000,"eventType":"T"}`},
		{"version beyond 2^53 stays exact", `{"eventId":"e","eventType":"T","aggregateId":"A","aggregateVersion":9007199254740993}`,
			`{"aggregateId":"A","aggregateVersion":9007199254740993,"eventType":"T"}`},
		{"escaping of envelope strings", `{"eventId":"e","eventType":"\u0000\u001F\"\\\/\b\f\n\r\t\u007f\u2028","aggregateId":"A"}`,
			`{"aggregateId":"A","eventType":"\u0000\u001f\"\\/\b\f\n\r\t` + "\u007f\u2028" + `"}`},
		{"nested sorting and spelling", `{"eventId":"e","eventType":"T","aggregateId":"A","payload":{"b":[1.0,2e0,"\u0041",{"d":-0,"c":-0.0}],"a":{"y":null,"x":true}}}`,
			`{"aggregateId":"A","eventType":"T","payload":{"a":{"x":true,"y":null},"b":[1,2,"A",{"c":0,"d":0}]}}`},
		{"empty containers", `{"eventId":"e","eventType":"T","aggregateId":"A","payload":{"o":{ },"a":[ ],"s":""}}`,
			`{"aggregateId":"A","eventType":"T","payload":{"a":[],"o":{},"s":""}}`},
		{"escaped names are sorted by their decoded value", `{"eventId":"e","eventType":"T","aggregateId":"A","payload":{"\u0062":1,"a\"":2,"a":3}}`,
			`{"aggregateId":"A","eventType":"T","payload":{"a":3,"a\"":2,"b":1}}`},
		// RFC 8785 §3.2.4 (sample of the canonicalization process).
		{"RFC 8785 3.2.4", `{"eventId":"e","eventType":"T","aggregateId":"A","payload":{
  "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}}`,
			`{"aggregateId":"A","eventType":"T","payload":{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],` +
				`"string":"€$\u000f\nA'B\"\\\\\"/"}}`},
		// RFC 8785 §3.2.3 (sorting of properties, by UTF-16 code units).
		{"RFC 8785 3.2.3", `{"eventId":"e","eventType":"T","aggregateId":"A","payload":{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}}`,
			`{"aggregateId":"A","eventType":"T","payload":{"\r":"Carriage Return","1":"One","` + "\u0080" + `":"Control",` +
				`"ö":"Latin Small Letter O With Diaeresis","€":"Euro Sign","😀":"Emoji: Grinning Face","` + "\ufb33" + `":"Hebrew Letter Dalet With Dagesh"}}`},
		{"numbers", `{"eventId":"e","eventType":"T","aggregateId":"A","payload":[1e21,1e20,0.000001,1e-7,123456789012345678,` +
			`1E+2,-1.5e-10,5e-324,1.7976931348623157e308,0.1,100,1e-400,-0,12345678901234567890123]}`,
			`{"aggregateId":"A","eventType":"T","payload":[1e+21,100000000000000000000,0.000001,1e-7,123456789012345680,` +
				`100,-1.5e-10,5e-324,1.7976931348623157e+308,0.1,100,0,0,1.2345678901234568e+22]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev := mustDecode(t, tc.in)
			if got := string(ev.AppendCanonical(nil)); got != tc.want {
				t.Errorf("canonical\n got  %s\n want %s", got, tc.want)
			}
			// Appends, and leaves the prefix alone.
			if got := string(ev.AppendCanonical([]byte("prefix:"))); got != "prefix:"+tc.want {
				t.Errorf("AppendCanonical with prefix = %s", got)
			}
			if !json.Valid(ev.AppendCanonical(nil)) {
				t.Error("canonical form is not valid JSON")
			}
		})
	}
}

// RFC 8785 Appendix B: IEEE-754 bit patterns and their ECMAScript form.
func TestAppendNumberRFC8785(t *testing.T) {
	tests := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, tc := range tests {
		f := math.Float64frombits(tc.bits)
		if got := string(appendNumber(nil, f)); got != tc.want {
			t.Errorf("%016x: got %s, want %s", tc.bits, got, tc.want)
		}
		// And end to end from a JSON literal of the same double.
		lit := strconv.FormatFloat(f, 'g', -1, 64)
		ev := mustDecode(t, base(`"payload":`+lit))
		want := `{"aggregateId":"CASE-1","eventType":"CaseOpened","payload":` + tc.want + `}`
		if got := string(ev.AppendCanonical(nil)); got != want {
			t.Errorf("payload %s: got %s, want %s", lit, got, want)
		}
	}
}

func TestCompareUTF16(t *testing.T) {
	ordered := []string{"", "\r", "1", "a", "ab", "b", "\u0080", "ö", "\u07ff", "\u0800", "€", "\ud7ff",
		"\U00010000", "\U0001F600", "\U0001F600a", "\U0001F601", "\U0010FFFF", "\ue000", "\ufb33", "\uffff"}
	for i := range ordered {
		for j := range ordered {
			got := compareUTF16([]byte(ordered[i]), []byte(ordered[j]))
			if (got < 0) != (i < j) || (got == 0) != (i == j) {
				t.Errorf("compareUTF16(%q, %q) = %d, positions %d, %d", ordered[i], ordered[j], got, i, j)
			}
		}
	}
}

// The canonical payload must match an independent RFC 8785 implementation.
func TestPayloadMatchesJCSLibrary(t *testing.T) {
	payloads := []string{
		`{"b":[1.0,2e0,"\u0041",{"d":-0,"c":-0.0}],"a":{"y":null,"x":true}}`,
		`[1e21,1e20,0.000001,1e-7,123456789012345678,1E+2,-1.5e-10,5e-324,0.1,100,-0]`,
		`{"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5,"\u0080":6,"\u00f6":7,"\ue000":8,"\ud800\udc00":9}`,
		`"\u0000\u001f\u007f\u2028\"\\\/\b\f\n\r\t"`,
		`{"z":{"y":{"x":[[],{},[{}],{"a":[]}]}}}`,
		`[333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001, 9007199254740993, 1.5e300, -4.9e-324]`,
		mustDecode(t, fpBase).payloadString(),
	}
	for _, p := range payloads {
		want, err := jcs.Transform([]byte(p))
		if err != nil {
			t.Fatalf("jcs.Transform(%s): %v", p, err)
		}
		ev := mustDecode(t, base(`"payload":`+p))
		if got := canonicalPayload(ev); got != string(want) {
			t.Errorf("payload %s\n got  %s\n jcs  %s", p, got, want)
		}
	}
}

func (e *Event) payloadString() string { return string(e.Payload) }

// canonicalPayload extracts the payload's canonical JSON from the event's.
func canonicalPayload(e *Event) string {
	c := string((&Event{Payload: e.Payload}).AppendCanonical(nil))
	return strings.TrimSuffix(strings.TrimPrefix(c, `{"payload":`), `}`)
}

func TestAppendCanonicalHandBuiltEvent(t *testing.T) {
	// An Event built by hand with a payload Decode would reject must not
	// panic; its payload is carried verbatim, so distinct payloads still
	// give distinct fingerprints.
	for _, p := range []string{`{"a":1,"a":2}`, `[1,`, `{"x":1e999}`, `"\ud800"`, `  [1]  x`, strings.Repeat("[", 100)} {
		e := &Event{EventType: "T", AggregateID: "A", Payload: []byte(p)}
		want := `{"aggregateId":"A","eventType":"T","payload":` + p + `}`
		if got := string(e.AppendCanonical(nil)); got != want {
			t.Errorf("payload %q: got %s", p, got)
		}
		_ = e.Fingerprint()
	}
	// Valid payload with surrounding whitespace is canonicalised normally.
	e := &Event{EventType: "T", AggregateID: "A", Payload: []byte(" { \"b\" : 1 , \"a\" : 2 } ")}
	if got := string(e.AppendCanonical(nil)); got != `{"aggregateId":"A","eventType":"T","payload":{"a":2,"b":1}}` {
		t.Errorf("got %s", got)
	}
	// Zero event.
	if got := string((&Event{}).AppendCanonical(nil)); got != `{}` {
		t.Errorf("zero event: %s", got)
	}
}

// Decode and Fingerprint share pooled scratch state; concurrent use must not
// mix it up (run with -race).
func TestConcurrentUse(t *testing.T) {
	inputs := []string{fpBase, benchEnvelope, base(`"payload":{"z":[{"y":1,"x":2}],"a":"\u00e9"}`), base(`"payload":[3,2,1]`)}
	want := make([][32]byte, len(inputs))
	for i, in := range inputs {
		want[i] = mustDecode(t, in).Fingerprint()
	}
	shared := mustDecode(t, fpBase)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ev Event
			for i := 0; i < 200; i++ {
				k := (g + i) % len(inputs)
				if err := DecodeInto([]byte(inputs[k]), 0, &ev); err != nil {
					t.Error(err)
					return
				}
				if ev.Fingerprint() != want[k] || shared.Fingerprint() != want[0] {
					t.Error("fingerprint differs under concurrency")
					return
				}
			}
		}()
	}
	wg.Wait()
}
