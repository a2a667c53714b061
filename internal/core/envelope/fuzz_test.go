package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

var knownFieldNames = map[string]bool{"value": true}

func init() {
	for _, n := range fieldNames {
		knownFieldNames[n] = true
	}
}

// FuzzDecode checks that Decode never panics, that what it accepts is JSON
// as encoding/json sees it with the same field values, and that the
// canonical form round-trips: an envelope rebuilt from it decodes to the same
// intent and fingerprint (and the payload's canonical form matches an
// independent RFC 8785 implementation).
func FuzzDecode(f *testing.F) {
	for _, tc := range validCases() {
		f.Add([]byte(tc.in))
	}
	for _, tc := range invalidCases() {
		if len(tc.in) <= 64<<10 { // the 10 MB case would only slow the fuzzer down
			f.Add([]byte(tc.in))
		}
	}
	f.Add([]byte(fpBase))
	for _, in := range fpSame {
		f.Add([]byte(in))
	}
	f.Add([]byte(benchEnvelope))

	// Payload-shaped seeds, for the second use of each input below.
	for _, p := range []string{`{"b":[1.0,2e0,"\u0041"],"a":{"y":null,"x":true}}`, `[1e21,-0,5e-324,"\ud83d\ude00"]`,
		`{"\u20ac":1,"\r":2,"\ufb33":3,"\ud83d\ude00":5,"\u00f6":7}`, `"\u0000\u001f\"\\\/"`, `{"a":{"a":{"a":[]}}}`} {
		f.Add([]byte(p))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzRecord(t, data)

		// Most fuzzed inputs are not envelopes, so on its own the target
		// would rarely reach the canonicaliser: use every input as a
		// payload too.
		wrapped := make([]byte, 0, len(payloadPrefix)+len(data)+1)
		wrapped = append(append(append(wrapped, payloadPrefix...), data...), '}')
		ev := fuzzRecord(t, wrapped)
		if !json.Valid(data) || len(wrapped) > DefaultMaxBytes {
			return
		}
		// data is one JSON value, so it is exactly the payload: Decode must
		// accept it iff it is I-JSON, as the jcs library judges (depth aside),
		// and then produce the library's canonical form.
		want, jerr := jcs.Transform(data)
		switch {
		case ev != nil && jerr != nil:
			t.Fatalf("payload %q accepted, but jcs rejects it: %v", data, jerr)
		case ev != nil && canonicalPayload(ev) != string(want):
			t.Fatalf("payload %q\n got  %s\n jcs  %s", data, canonicalPayload(ev), want)
		case ev == nil && jerr == nil && utf8.Valid(data):
			_, err := Decode(wrapped, 0)
			if !strings.Contains(err.Error(), "nested deeper") {
				t.Fatalf("payload %q rejected (%v), but jcs accepts it", data, err)
			}
		}
	})
}

const payloadPrefix = `{"eventId":"e","eventType":"T","aggregateId":"A","payload":`

// fuzzRecord checks one record value; it returns the event if it decoded.
// DecodeFingerprint must agree with DecodeInto and Fingerprint on every
// input: the same event or the same error, and the same fingerprint.
func fuzzRecord(t *testing.T, data []byte) *Event {
	var ev, ev2 Event
	err := DecodeInto(data, 0, &ev)
	fp2, err2 := DecodeFingerprint(data, 0, &ev2)
	switch {
	case (err == nil) != (err2 == nil) || err != nil && err.Error() != err2.Error():
		t.Fatalf("DecodeInto: %v; DecodeFingerprint: %v", err, err2)
	case !reflect.DeepEqual(ev, ev2):
		t.Fatalf("DecodeInto: %+v; DecodeFingerprint: %+v", ev, ev2)
	case err == nil && fp2 != ev.Fingerprint():
		t.Fatalf("DecodeFingerprint's fingerprint %x, Fingerprint's %x", fp2, ev.Fingerprint())
	}
	if err != nil {
		checkRejection(t, data, &ev, err)
		return nil
	}
	checkAgainstStdlib(t, data, &ev)
	checkRoundTrip(t, &ev)
	return &ev
}

func checkRejection(t *testing.T, data []byte, ev *Event, err error) {
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %T %v is not *Error", err, err)
	}
	if !knownFieldNames[e.Field] || e.Reason() != "invalid:"+e.Field || !utf8.ValidString(e.Msg) || len(e.Msg) > 200 {
		t.Fatalf("bad error %#v", e)
	}
	if ev.EventID != "" || ev.Payload != nil || ev.AggregateVersion != 0 {
		t.Fatalf("event not zeroed after error: %+v", ev)
	}
	// Our lexer must not be stricter than the standard library's.
	if strings.HasPrefix(e.Msg, "not JSON") && json.Valid(data) {
		t.Fatalf("rejected as %v but encoding/json finds it valid: %q", err, data)
	}
}

func checkAgainstStdlib(t *testing.T, data []byte, ev *Event) {
	if !json.Valid(data) || !utf8.Valid(data) {
		t.Fatalf("accepted invalid JSON %q", data)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("accepted, but not an object for encoding/json: %v", err)
	}
	strField := func(name, got string) {
		var want string
		if raw, ok := m[name]; ok && string(raw) != "null" {
			if err := json.Unmarshal(raw, &want); err != nil {
				t.Fatalf("%s: encoding/json: %v", name, err)
			}
		}
		if got != want {
			t.Fatalf("%s = %q, encoding/json says %q", name, got, want)
		}
	}
	strField("eventId", ev.EventID)
	strField("eventType", ev.EventType)
	strField("aggregateId", ev.AggregateID)
	strField("aggregateType", ev.AggregateType)
	strField("tenantId", ev.TenantID)
	strField("occurredAt", ev.OccurredAt)
	strField("correlationId", ev.CorrelationID)
	strField("causationId", ev.CausationID)
	strField("producer", ev.Producer)
	if n := len(ev.EventID); n < 1 || n > MaxIDBytes {
		t.Fatalf("eventId length %d", n)
	}
	if n := len(ev.AggregateID); n < 1 || n > MaxIDBytes {
		t.Fatalf("aggregateId length %d", n)
	}
	if ev.EventType == "" {
		t.Fatal("empty eventType accepted")
	}
	if raw, ok := m["aggregateVersion"]; ok && string(raw) != "null" {
		r, ok := new(big.Rat).SetString(string(raw))
		if !ok || !r.IsInt() || r.Num().Int64() != ev.AggregateVersion || ev.AggregateVersion < 1 {
			t.Fatalf("aggregateVersion %d from %s", ev.AggregateVersion, raw)
		}
	} else if ev.AggregateVersion != 0 {
		t.Fatalf("aggregateVersion %d without the member", ev.AggregateVersion)
	}
	if raw, ok := m["payload"]; ok != (ev.Payload != nil) || !bytes.Equal(bytes.TrimSpace(raw), ev.Payload) {
		t.Fatalf("payload %q, encoding/json says %q (present %v)", ev.Payload, raw, ok)
	}
	if ev.OccurredAt != "" {
		if _, err := time.Parse(time.RFC3339, ev.OccurredAt); err != nil {
			t.Fatalf("occurredAt %q accepted but time.Parse: %v", ev.OccurredAt, err)
		}
	}
}

func checkRoundTrip(t *testing.T, ev *Event) {
	canon := ev.AppendCanonical(nil)
	if !json.Valid(canon) || !utf8.Valid(canon) {
		t.Fatalf("canonical form is not valid JSON: %q", canon)
	}
	// The canonical object always has aggregateId and eventType, so it is
	// never empty and eventId can be spliced in at the front.
	rebuilt := appendCanonicalString([]byte(`{"eventId":`), ev.EventID)
	rebuilt = append(append(rebuilt, ','), canon[1:]...)
	ev2, err := Decode(rebuilt, len(rebuilt))
	if err != nil {
		t.Fatalf("rebuilt envelope %q rejected: %v", rebuilt, err)
	}
	if ev2.Fingerprint() != ev.Fingerprint() {
		t.Fatalf("fingerprint changed on round trip\n canon  %s\n canon2 %s", canon, ev2.AppendCanonical(nil))
	}
	if canon2 := ev2.AppendCanonical(nil); !bytes.Equal(canon2, canon) {
		t.Fatalf("canonical form not idempotent\n %s\n %s", canon, canon2)
	}
	tenant := ev.TenantID
	if ev2.EventID != ev.EventID || ev2.EventType != ev.EventType || ev2.AggregateID != ev.AggregateID ||
		ev2.AggregateType != ev.AggregateType || ev2.AggregateVersion != ev.AggregateVersion || ev2.TenantID != tenant {
		t.Fatalf("intent changed on round trip: %+v vs %+v", ev2, ev)
	}
	if ev.Payload != nil {
		// What Decode accepted must canonicalise without AppendCanonical's
		// verbatim fallback for invalid payloads.
		c := getCanonicalizer()
		c.reset(ev.Payload, true)
		_, err := c.value(nil, 2)
		if err != nil || c.semErr != nil {
			t.Fatalf("accepted payload %q does not canonicalise: %v %v", ev.Payload, err, c.semErr)
		}
		putCanonicalizer(c)
		if want, err := jcs.Transform(ev.Payload); err == nil && canonicalPayload(ev) != string(want) {
			t.Fatalf("payload %q\n got  %s\n jcs  %s", ev.Payload, canonicalPayload(ev), want)
		}
	}
}
