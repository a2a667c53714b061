package envelope

import (
	"testing"

	"github.com/projector-dev/projector/internal/harness/race"
)

// benchEnvelope is a typical envelope: about 300 bytes, a ULID event id, all
// the usual optional members, a small nested payload whose members are not
// in canonical order (so the canonicaliser has to sort).
const benchEnvelope = `{"eventId":"01JZ8X3M9Q4K7T2V5N6B8C0D1E","eventType":"CaseEscalated","aggregateId":"CASE-2026-000123",` +
	`"aggregateType":"RegulatoryCase","aggregateVersion":42,"tenantId":"acme-eu","occurredAt":"2026-06-28T10:15:30.123Z",` +
	`"payload":{"status":"ESCALATED","reasonCode":"SLA_BREACH","level":2,"assignee":{"team":"compliance","id":"u-981"}}}`

func TestBenchEnvelopeIsTypical(t *testing.T) {
	if n := len(benchEnvelope); n < 280 || n > 340 {
		t.Errorf("benchEnvelope is %d bytes, want about 300", n)
	}
	if _, err := Decode([]byte(benchEnvelope), 0); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkDecode(b *testing.B) {
	data := []byte(benchEnvelope)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	var ev Event
	for b.Loop() {
		if err := DecodeInto(data, 0, &ev); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFingerprint(b *testing.B) {
	ev, err := Decode([]byte(benchEnvelope), 0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = ev.Fingerprint()
	}
}

func BenchmarkDecodeAndFingerprint(b *testing.B) {
	data := []byte(benchEnvelope)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	var ev Event
	for b.Loop() {
		if err := DecodeInto(data, 0, &ev); err != nil {
			b.Fatal(err)
		}
		_ = ev.Fingerprint()
	}
}

// BenchmarkDecodeFingerprint is BenchmarkDecodeAndFingerprint in one call,
// the processor's: one walk of the payload for both.
func BenchmarkDecodeFingerprint(b *testing.B) {
	data := []byte(benchEnvelope)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	var ev Event
	for b.Loop() {
		if _, err := DecodeFingerprint(data, 0, &ev); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeAlloc is the Decode (not DecodeInto) form, for reference.
func BenchmarkDecodeAlloc(b *testing.B) {
	data := []byte(benchEnvelope)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(data, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// The hot path's allocation budget: DecodeInto makes one allocation (the
// shared string of all string fields), Fingerprint none once the pool is warm,
// DecodeFingerprint the one of DecodeInto.
func TestHotPathAllocations(t *testing.T) {
	if race.Enabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	data := []byte(benchEnvelope)
	var ev Event
	if n := testing.AllocsPerRun(200, func() { _ = DecodeInto(data, 0, &ev) }); n > 1 {
		t.Errorf("DecodeInto: %v allocations per run, want <= 1", n)
	}
	if n := testing.AllocsPerRun(200, func() { _ = ev.Fingerprint() }); n > 0 {
		t.Errorf("Fingerprint: %v allocations per run, want 0", n)
	}
	if n := testing.AllocsPerRun(200, func() { _, _ = DecodeFingerprint(data, 0, &ev) }); n > 1 {
		t.Errorf("DecodeFingerprint: %v allocations per run, want <= 1", n)
	}
}
