package envelope

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// env builds an envelope from raw member texts, in order.
func env(members ...string) string { return "{" + strings.Join(members, ",") + "}" }

const (
	mID   = `"eventId":"e-1"`
	mType = `"eventType":"CaseOpened"`
	mAgg  = `"aggregateId":"CASE-1"`
)

// base is the three required members followed by extra ones.
func base(extra ...string) string { return env(append([]string{mID, mType, mAgg}, extra...)...) }

type validCase struct {
	name string
	in   string
	want Event
}

func validCases() []validCase {
	id512 := strings.Repeat("x", MaxIDBytes)
	// 170 × "é" (2 bytes) + 2 bytes = 342 bytes, 172 characters
	multibyte := strings.Repeat("é", 170) + "ab"
	deep63 := strings.Repeat("[", 63) + strings.Repeat("]", 63) // payload depth 63, record depth 64

	return []validCase{
		{"minimal", base(),
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1"}},
		{"all fields",
			`{"eventId":"01JZ","eventType":"CaseEscalated","aggregateId":"CASE-1","aggregateType":"RegulatoryCase",` +
				`"aggregateVersion":42,"tenantId":"acme","occurredAt":"2026-06-28T10:15:30Z","correlationId":"corr",` +
				`"causationId":"cause","producer":"svc","payload":{"status":"ESCALATED","n":[1,2.5,{"x":null}]}}`,
			Event{EventID: "01JZ", EventType: "CaseEscalated", AggregateID: "CASE-1", AggregateType: "RegulatoryCase",
				AggregateVersion: 42, TenantID: "acme", OccurredAt: "2026-06-28T10:15:30Z", CorrelationID: "corr",
				CausationID: "cause", Producer: "svc", Payload: []byte(`{"status":"ESCALATED","n":[1,2.5,{"x":null}]}`)}},
		{"null payload", base(`"payload":null`),
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1", Payload: []byte("null")}},
		{"scalar payloads: string", base(`"payload":"text"`),
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1", Payload: []byte(`"text"`)}},
		{"scalar payloads: number", base(`"payload":-1.5e3`),
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1", Payload: []byte(`-1.5e3`)}},
		{"payload without surrounding whitespace", "{ \"payload\" :\n\t[ 1 , 2 ] \r\n, " + mID + "," + mType + "," + mAgg + " }",
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1", Payload: []byte("[ 1 , 2 ]")}},
		{"unknown fields ignored",
			base(`"extra":{"deep":[1,{"a":"b"},null,true,false,-0.5e-3]}`, `"schemaVersion":7`, `"":"empty name"`,
				`"extra2":{"dup":1,"dup":2,"lone":"\ud800","big":1e999}`),
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1"}},
		{"optional nulls are absent",
			base(`"aggregateType":null`, `"aggregateVersion":null`, `"tenantId":null`, `"occurredAt":null`,
				`"correlationId":null`, `"causationId":null`, `"producer":null`),
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1"}},
		{"empty optional strings", base(`"tenantId":""`, `"aggregateType":""`, `"producer":""`),
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1"}},
		{"escaped member names match known fields",
			`{"event\u0049d":"e-1","\u0065ventType":"CaseOpened","aggregate\u0049\u0064":"CASE-1","payl\u006fad":1}`,
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1", Payload: []byte("1")}},
		{"escaped values are decoded",
			`{"eventId":"e\u0301\"\\\/\b\f\n\r\t","eventType":"\ud83d\ude00","aggregateId":"caf\u00e9"}`,
			Event{EventID: "e\u0301\"\\/\b\f\n\r\t", EventType: "😀", AggregateID: "café"}},
		{"raw multibyte and max-length ids", env(`"eventId":"`+id512+`"`, mType, `"aggregateId":"`+multibyte+`"`),
			Event{EventID: id512, EventType: "CaseOpened", AggregateID: multibyte}},
		{"ids of exactly 512 bytes after unescaping", env(`"eventId":"`+strings.Repeat(`\u0078`, MaxIDBytes)+`"`, mType, mAgg),
			Event{EventID: id512, EventType: "CaseOpened", AggregateID: "CASE-1"}},
		{"version 1", base(`"aggregateVersion":1`),
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1", AggregateVersion: 1}},
		{"version max int64", base(`"aggregateVersion":9223372036854775807`),
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1", AggregateVersion: 9223372036854775807}},
		{"version 3.0", base(`"aggregateVersion":3.0`),
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1", AggregateVersion: 3}},
		{"version 1e3", base(`"aggregateVersion":1e3`),
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1", AggregateVersion: 1000}},
		{"version 0.5E+1", base(`"aggregateVersion":0.5E+1`),
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1", AggregateVersion: 5}},
		{"version max int64 in exponent form", base(`"aggregateVersion":92233720368547758.070e2`),
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1", AggregateVersion: 9223372036854775807}},
		{"version beyond float precision stays exact", base(`"aggregateVersion":9007199254740993`),
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1", AggregateVersion: 9007199254740993}},
		{"occurredAt with fraction and offset", base(`"occurredAt":"2026-06-28T10:15:30.123456789+02:00"`),
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1", OccurredAt: "2026-06-28T10:15:30.123456789+02:00"}},
		{"occurredAt leap day", base(`"occurredAt":"2024-02-29T23:59:59-05:30"`),
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1", OccurredAt: "2024-02-29T23:59:59-05:30"}},
		{"payload at the depth limit", base(`"payload":` + deep63),
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1", Payload: []byte(deep63)}},
		{"payload with I-JSON edge values",
			base(`"payload":{"tiny":1e-400,"pair":"\ud83d\ude00","a":1,"b":{"a":2},"\u0061\u0062":3}`),
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1",
				Payload: []byte(`{"tiny":1e-400,"pair":"\ud83d\ude00","a":1,"b":{"a":2},"\u0061\u0062":3}`)}},
		{"surrounding whitespace", " \t\r\n" + base() + "\n\n ",
			Event{EventID: "e-1", EventType: "CaseOpened", AggregateID: "CASE-1"}},
	}
}

func TestDecodeValid(t *testing.T) {
	for _, tc := range validCases() {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := Decode([]byte(tc.in), 0)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			assertEvent(t, ev, &tc.want)

			// DecodeInto over a dirty Event must give the same result.
			dirty := Event{EventID: "old", AggregateVersion: 99, TenantID: "old", Payload: []byte("old")}
			if err := DecodeInto([]byte(tc.in), 0, &dirty); err != nil {
				t.Fatalf("DecodeInto: %v", err)
			}
			assertEvent(t, &dirty, &tc.want)
		})
	}
}

func assertEvent(t *testing.T, got, want *Event) {
	t.Helper()
	type noPayload struct {
		EventID, EventType, AggregateID, AggregateType string
		AggregateVersion                               int64
		TenantID, OccurredAt                           string
		CorrelationID, CausationID, Producer           string
	}
	strip := func(e *Event) noPayload {
		return noPayload{e.EventID, e.EventType, e.AggregateID, e.AggregateType, e.AggregateVersion,
			e.TenantID, e.OccurredAt, e.CorrelationID, e.CausationID, e.Producer}
	}
	if g, w := strip(got), strip(want); g != w {
		t.Errorf("event mismatch\n got  %+v\n want %+v", g, w)
	}
	if (got.Payload == nil) != (want.Payload == nil) || !bytes.Equal(got.Payload, want.Payload) {
		t.Errorf("payload = %q (nil=%v), want %q (nil=%v)", got.Payload, got.Payload == nil, want.Payload, want.Payload == nil)
	}
}

type invalidCase struct{ name, in, reason string }

func invalidCases() []invalidCase {
	long := strings.Repeat("y", MaxIDBytes+1)
	deepPayload := strings.Repeat("[", 64) + strings.Repeat("]", 64) // payload depth 64 → record depth 65
	tenMB := `"` + strings.Repeat("a", 10<<20) + `"`

	return []invalidCase{
		// whole-record problems
		{"not JSON", `hello`, "invalid:value"},
		{"JSON array", `[1,2,3]`, "invalid:value"},
		{"JSON string", `"eventId"`, "invalid:value"},
		{"JSON number", `42`, "invalid:value"},
		{"JSON null", `null`, "invalid:value"},
		{"empty input", ``, "invalid:value"},
		{"only whitespace", " \n\t ", "invalid:value"},
		{"trailing garbage", base() + `x`, "invalid:value"},
		{"two objects", base() + base(), "invalid:value"},
		{"truncated", base()[:20], "invalid:value"},
		{"truncated after a bad field (syntax wins)", `{"eventId":5,`, "invalid:value"},
		{"byte order mark", "\ufeff" + base(), "invalid:value"},
		{"trailing comma in object", env(mID, mType, mAgg, ``), "invalid:value"},
		{"trailing comma in payload array", base(`"payload":[1,]`), "invalid:value"},
		{"missing colon", `{"eventId" "e"}`, "invalid:value"},
		{"single quotes", `{'eventId':'e'}`, "invalid:value"},
		{"unquoted name", `{eventId:"e"}`, "invalid:value"},
		{"leading zero in payload", base(`"payload":01`), "invalid:value"},
		{"bare fraction", base(`"payload":.5`), "invalid:value"},
		{"plus sign", base(`"payload":+1`), "invalid:value"},
		{"NaN", base(`"payload":NaN`), "invalid:value"},
		{"Infinity", base(`"payload":-Infinity`), "invalid:value"},
		{"bad literal", base(`"payload":tru`), "invalid:value"},
		{"bad escape", base(`"payload":"\x"`), "invalid:value"},
		{"short unicode escape", base(`"payload":"\u12"`), "invalid:value"},
		{"raw control character in string", base("\"payload\":\"a\tb\""), "invalid:value"},
		{"unterminated string", `{"eventId":"e`, "invalid:value"},
		{"invalid UTF-8 in a string", env(`"eventId":"e`+"\xff"+`"`, mType, mAgg), "invalid:value"},
		{"invalid UTF-8 raw", "{\xff}", "invalid:value"},
		{"UTF-8 encoded surrogate", env(`"eventId":"`+"\xed\xa0\x80"+`"`, mType, mAgg), "invalid:value"},
		{"overlong UTF-8", env(`"eventId":"`+"\xc0\xaf"+`"`, mType, mAgg), "invalid:value"},
		{"10 MB payload", base(`"payload":` + tenMB), "invalid:value"},
		{"too deep in an unknown member", base(`"x":` + deepPayload), "invalid:value"},

		// required fields
		{"missing eventId", env(mType, mAgg), "invalid:eventId"},
		{"missing eventType", env(mID, mAgg), "invalid:eventType"},
		{"missing aggregateId", env(mID, mType), "invalid:aggregateId"},
		{"empty object", `{}`, "invalid:eventId"},
		{"null eventId", env(`"eventId":null`, mType, mAgg), "invalid:eventId"},
		{"eventId number", env(`"eventId":123`, mType, mAgg), "invalid:eventId"},
		{"eventId object", env(`"eventId":{}`, mType, mAgg), "invalid:eventId"},
		{"eventType boolean", env(mID, `"eventType":true`, mAgg), "invalid:eventType"},
		{"eventType null", env(mID, `"eventType":null`, mAgg), "invalid:eventType"},
		{"aggregateId array", env(mID, mType, `"aggregateId":["CASE-1"]`), "invalid:aggregateId"},
		{"aggregateId number", env(mID, mType, `"aggregateId":1`), "invalid:aggregateId"},
		{"empty eventId", env(`"eventId":""`, mType, mAgg), "invalid:eventId"},
		{"empty eventType", env(mID, `"eventType":""`, mAgg), "invalid:eventType"},
		{"empty aggregateId", env(mID, mType, `"aggregateId":""`), "invalid:aggregateId"},
		{"513-byte eventId", env(`"eventId":"`+long+`"`, mType, mAgg), "invalid:eventId"},
		{"513-byte aggregateId", env(mID, mType, `"aggregateId":"`+long+`"`), "invalid:aggregateId"},
		{"513 bytes in 257 characters", env(mID, mType, `"aggregateId":"`+strings.Repeat("é", 256)+`x"`), "invalid:aggregateId"},
		{"duplicate eventId", env(mID, mType, mAgg, `"eventId":"e-2"`), "invalid:eventId"},
		{"duplicate eventId, same value", env(mID, mType, mAgg, mID), "invalid:eventId"},
		{"duplicate via escaped name", env(mID, mType, mAgg, `"\u0065ventId":"e-1"`), "invalid:eventId"},
		{"duplicate optional, first null", base(`"tenantId":null`, `"tenantId":"t"`), "invalid:tenantId"},
		{"duplicate payload", base(`"payload":1`, `"payload":1`), "invalid:payload"},
		{"lone high surrogate in eventId", env(`"eventId":"\ud800"`, mType, mAgg), "invalid:eventId"},
		{"lone low surrogate in aggregateId", env(mID, mType, `"aggregateId":"a\udc00b"`), "invalid:aggregateId"},
		{"reversed surrogate pair in eventType", env(mID, `"eventType":"\ude00\ud83d"`, mAgg), "invalid:eventType"},

		// aggregateVersion
		{"version 0", base(`"aggregateVersion":0`), "invalid:aggregateVersion"},
		{"version -0", base(`"aggregateVersion":-0`), "invalid:aggregateVersion"},
		{"version 0.0", base(`"aggregateVersion":0.0`), "invalid:aggregateVersion"},
		{"version -1", base(`"aggregateVersion":-1`), "invalid:aggregateVersion"},
		{"version -1e3", base(`"aggregateVersion":-1e3`), "invalid:aggregateVersion"},
		{"version 1.5", base(`"aggregateVersion":1.5`), "invalid:aggregateVersion"},
		{"version 1500e-3", base(`"aggregateVersion":1500e-3`), "invalid:aggregateVersion"},
		{"version 1e-400", base(`"aggregateVersion":1e-400`), "invalid:aggregateVersion"},
		{"version 1e400", base(`"aggregateVersion":1e400`), "invalid:aggregateVersion"},
		{"version 1e999999999999999999999", base(`"aggregateVersion":1e999999999999999999999`), "invalid:aggregateVersion"},
		{"version 99999999999999999999", base(`"aggregateVersion":99999999999999999999`), "invalid:aggregateVersion"},
		{"version max int64 + 1", base(`"aggregateVersion":9223372036854775808`), "invalid:aggregateVersion"},
		{"version 1e19", base(`"aggregateVersion":1e19`), "invalid:aggregateVersion"},
		{`version "3"`, base(`"aggregateVersion":"3"`), "invalid:aggregateVersion"},
		{"version true", base(`"aggregateVersion":true`), "invalid:aggregateVersion"},
		{"version array", base(`"aggregateVersion":[1]`), "invalid:aggregateVersion"},

		// optional fields
		{"tenantId number", base(`"tenantId":7`), "invalid:tenantId"},
		{"aggregateType array", base(`"aggregateType":["a"]`), "invalid:aggregateType"},
		{"correlationId object", base(`"correlationId":{}`), "invalid:correlationId"},
		{"causationId boolean", base(`"causationId":false`), "invalid:causationId"},
		{"producer number", base(`"producer":1`), "invalid:producer"},
		{"occurredAt not a date", base(`"occurredAt":"yesterday"`), "invalid:occurredAt"},
		{"occurredAt empty", base(`"occurredAt":""`), "invalid:occurredAt"},
		{"occurredAt without zone", base(`"occurredAt":"2026-06-28T10:15:30"`), "invalid:occurredAt"},
		{"occurredAt date only", base(`"occurredAt":"2026-06-28"`), "invalid:occurredAt"},
		{"occurredAt space separator", base(`"occurredAt":"2026-06-28 10:15:30Z"`), "invalid:occurredAt"},
		{"occurredAt Feb 30", base(`"occurredAt":"2026-02-30T10:15:30Z"`), "invalid:occurredAt"},
		{"occurredAt Feb 29 non-leap", base(`"occurredAt":"2100-02-29T10:15:30Z"`), "invalid:occurredAt"},
		{"occurredAt hour 24", base(`"occurredAt":"2026-06-28T24:00:00Z"`), "invalid:occurredAt"},
		{"occurredAt bad offset", base(`"occurredAt":"2026-06-28T10:15:30+0200"`), "invalid:occurredAt"},
		{"occurredAt empty fraction", base(`"occurredAt":"2026-06-28T10:15:30.Z"`), "invalid:occurredAt"},
		{"occurredAt number", base(`"occurredAt":1719569730`), "invalid:occurredAt"},

		// payload
		{"payload depth 65", base(`"payload":` + deepPayload), "invalid:payload"},
		{"payload object depth 65", base(`"payload":` + strings.Repeat(`{"a":`, 64) + "1" + strings.Repeat("}", 64)), "invalid:payload"},
		{"payload duplicate member", base(`"payload":{"a":1,"b":2,"a":1}`), "invalid:payload"},
		{"payload duplicate via escape", base(`"payload":{"ab":1,"\u0061b":2}`), "invalid:payload"},
		{"payload nested duplicate", base(`"payload":[{"x":{"k":1,"k":1}}]`), "invalid:payload"},
		{"payload lone surrogate in value", base(`"payload":["\udfff"]`), "invalid:payload"},
		{"payload lone surrogate in name", base(`"payload":{"\ud800x":1}`), "invalid:payload"},
		{"payload number overflow", base(`"payload":{"n":1e400}`), "invalid:payload"},
		{"payload negative overflow", base(`"payload":[-1.8e308]`), "invalid:payload"},

		// precedence
		{"first field problem in member order wins", env(`"eventType":1`, `"eventId":2`, mAgg), "invalid:eventType"},
		{"field problem beats missing field", env(`"aggregateId":1`), "invalid:aggregateId"},
		{"syntax error after a payload problem", base(`"payload":{"a":1,"a":2}`, `"x":[}`), "invalid:value"},
	}
}

func TestDecodeInvalid(t *testing.T) {
	tests := invalidCases()
	if len(tests) < 25 {
		t.Fatalf("only %d cases", len(tests))
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := Decode([]byte(tc.in), 0)
			if err == nil {
				t.Fatalf("Decode accepted %.80q: %+v", tc.in, ev)
			}
			if ev != nil {
				t.Errorf("Decode returned an event with an error")
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T is not *Error", err)
			}
			if e.Reason() != tc.reason {
				t.Errorf("Reason() = %q (%v), want %q", e.Reason(), err, tc.reason)
			}
			if want := "envelope: invalid " + e.Field + ": " + e.Msg; err.Error() != want {
				t.Errorf("Error() = %q, want %q", err.Error(), want)
			}
			if e.Msg == "" || len(e.Msg) > 200 {
				t.Errorf("message %q is empty or too long", e.Msg)
			}
			dirty := Event{EventID: "old", Payload: []byte("x")}
			if err := DecodeInto([]byte(tc.in), 0, &dirty); err == nil {
				t.Fatal("DecodeInto accepted what Decode rejected")
			}
			if dirty.EventID != "" || dirty.Payload != nil {
				t.Errorf("DecodeInto left %+v in ev after an error", dirty)
			}
		})
	}
}

func TestErrorMessages(t *testing.T) {
	tests := []struct{ in, want string }{
		{env(`"eventId":5`, mType, mAgg), "envelope: invalid eventId: must be a string, got number"},
		{env(`"eventId":null`, mType, mAgg), "envelope: invalid eventId: must be a string, got null"},
		{env(mType, mAgg), "envelope: invalid eventId: required field is missing"},
		{env(mID, mType, mAgg, mID), "envelope: invalid eventId: duplicate field"},
		{env(`"eventId":""`, mType, mAgg), "envelope: invalid eventId: must not be empty"},
		{env(mID, mType, `"aggregateId":"`+strings.Repeat("y", 513)+`"`), "envelope: invalid aggregateId: must be at most 512 bytes, got 513"},
		{base(`"aggregateVersion":"3"`), "envelope: invalid aggregateVersion: must be an integer, got string"},
		{base(`"aggregateVersion":0`), "envelope: invalid aggregateVersion: must be >= 1, got 0"},
		{base(`"aggregateVersion":-2`), "envelope: invalid aggregateVersion: must be >= 1, got -2"},
		{base(`"aggregateVersion":1.5`), "envelope: invalid aggregateVersion: must be an integer, got 1.5"},
		{base(`"aggregateVersion":1e400`), "envelope: invalid aggregateVersion: out of range (max 9223372036854775807), got 1e400"},
		{base(`"occurredAt":"soon"`), `envelope: invalid occurredAt: must be an RFC 3339 timestamp, got "soon"`},
		{`[1]`, "envelope: invalid value: must be a JSON object, got array"},
		{``, "envelope: invalid value: not JSON: empty input"},
		{`{"a":1}x`, "envelope: invalid value: not JSON: unexpected data after the top-level value at offset 7"},
		{`{"a":tx}`, "envelope: invalid value: not JSON: invalid literal at offset 5"},
		{"{\"a\":\"\xff\"}", "envelope: invalid value: not valid UTF-8"},
		{base(`"payload":{"k":1,"k":2}`), `envelope: invalid payload: duplicate member name "k" in an object`},
		// Of several duplicates, the name that sorts first, in a small
		// object as in a large one (and emitting, as DecodeFingerprint
		// does, as validating).
		{base(`"payload":{"b":1,"a":2,"b":3,"a":4}`), `envelope: invalid payload: duplicate member name "a" in an object`},
		{base(`"payload":{"b":1,"a":2,"b":3,"a":4,"c":5,"d":6,"e":7,"f":8,"g":9}`), `envelope: invalid payload: duplicate member name "a" in an object`},
		{base(`"payload":` + strings.Repeat("[", 64) + strings.Repeat("]", 64)), "envelope: invalid payload: nested deeper than 64 levels"},
	}
	for _, tc := range tests {
		_, err := Decode([]byte(tc.in), 0)
		if err == nil || err.Error() != tc.want {
			t.Errorf("Decode(%.60q)\n got  %v\n want %s", tc.in, err, tc.want)
		}
	}
}

func TestMaxBytes(t *testing.T) {
	in := []byte(base())
	if _, err := Decode(in, len(in)); err != nil {
		t.Fatalf("record of exactly maxBytes rejected: %v", err)
	}
	_, err := Decode(in, len(in)-1)
	var e *Error
	if !errors.As(err, &e) || e.Reason() != "invalid:value" || !strings.Contains(e.Msg, "too large") {
		t.Fatalf("record of maxBytes+1: got %v", err)
	}
	// <= 0 means the default limit.
	big := []byte(base(`"payload":"` + strings.Repeat("a", DefaultMaxBytes) + `"`))
	for _, max := range []int{0, -1} {
		if _, err := Decode(big, max); err == nil {
			t.Errorf("maxBytes=%d: record above DefaultMaxBytes accepted", max)
		}
	}
	if _, err := Decode(big, 2*DefaultMaxBytes); err != nil {
		t.Errorf("raised limit: %v", err)
	}
}

func TestPayloadAliasesInput(t *testing.T) {
	in := []byte(base(`"payload":{"a":1}`))
	ev, err := Decode(in, 0)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(in, []byte(`{"a":1}`))
	if &ev.Payload[0] != &in[i] {
		t.Error("Payload is not a sub-slice of the input")
	}
	// String fields must not alias the input (they are Go strings).
	copy(in, bytes.Repeat([]byte("#"), len(in)))
	if ev.EventID != "e-1" || ev.AggregateID != "CASE-1" {
		t.Error("string fields changed with the input buffer")
	}
}

// validRFC3339 must accept only what time.Parse(time.RFC3339) accepts (so
// downstream parsing cannot fail), and must reject what RFC 3339 forbids even
// where time.Parse's lenient fallback accepts it (offset +24:00, minute 60).
func TestValidRFC3339(t *testing.T) {
	cases := []struct {
		in   string
		want bool
	}{
		{"2026-06-28T10:15:30Z", true},
		{"2026-06-28T10:15:30.1Z", true},
		{"2026-06-28T10:15:30.123456789012Z", true},
		{"2026-06-28T10:15:30+00:00", true},
		{"2026-06-28T10:15:30-23:59", true},
		{"2026-06-28T10:15:30.5+01:00", true},
		{"0000-01-01T00:00:00Z", true},
		{"9999-12-31T23:59:59Z", true},
		{"2000-02-29T00:00:00Z", true},
		{"2024-02-29T12:00:00+05:45", true},
		{"2026-06-28t10:15:30Z", false}, // RFC 3339 allows lower case; Go does not
		{"2026-06-28T10:15:30z", false},
		{"2026-06-28T10:15:60Z", false}, // leap second: RFC 3339 allows it; Go does not
		{"2026-13-01T00:00:00Z", false},
		{"2026-00-01T00:00:00Z", false},
		{"2026-01-00T00:00:00Z", false},
		{"2026-04-31T00:00:00Z", false},
		{"1900-02-29T00:00:00Z", false},
		{"2026-06-28T10:15:30+24:00", false},
		{"2026-06-28T10:15:30+01:60", false},
		{"2026-06-28T10:15:30.Z", false},
		{"2026-06-28T10:15:30,5Z", false},
		{"2026-06-28T10:15:30", false},
		{"2026-06-28T10:15Z", false},
		{"+2026-06-28T10:15:30Z", false},
		{"2026-06-28T10:15:30ZZ", false},
		{"2026-06-28T10:15:30+01:00Z", false},
		{"2026-06-28T1a:15:30Z", false},
		{"2026-6-28T10:15:30Z", false},
		{" 2026-06-28T10:15:30Z", false},
		{"", false},
	}
	for _, c := range cases {
		got := validRFC3339([]byte(c.in))
		if got != c.want {
			t.Errorf("validRFC3339(%q) = %v, want %v", c.in, got, c.want)
		}
		if _, err := time.Parse(time.RFC3339, c.in); got && err != nil {
			t.Errorf("validRFC3339(%q) = true but time.Parse fails: %v", c.in, err)
		}
	}
}
