package wiring_test

// Generators of hostile records for TestNoRecordStopsAPartition
// (hostile_property_test.go): one set per topic the worker consumes, each
// generator a named kind, all driven by one seeded math/rand/v2 source.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/receipt"
	"github.com/projector-dev/projector/sideeffects"
)

// hostile is one generated record and the generator (kind) that made it.
// ownDeadLetter marks a record the test checks one by one: a command that
// can never apply, which must get its own dead letter. forged is the
// receipt key of a well-formed receipt on the receipts topic, which the
// ingress's view must take in.
type hostile struct {
	kind          string
	rec           *kgo.Record
	ownDeadLetter bool
	forged        string
}

// gen makes hostile records. Every aggregate, event id and key it invents
// is fresh (g.n), so hostile records never touch the valid records' state:
// what becomes of a valid record after them depends only on whether the
// partition still flows.
type gen struct {
	r          *rand.Rand
	n          int
	maxRecord  int // kafka.maxRecordBytes
	partitions int32
	// seen holds valid envelopes produced so far, with their partition,
	// for duplicates and conflicts.
	seen []seenEnvelope
	// ghostKeys are keys of intents offered for an effect no rule
	// configures: they stay pending, so commands can name existing keys.
	ghostKeys []string
}

type seenEnvelope struct {
	value     []byte
	partition int32
	env       map[string]any
}

// kindFunc makes the hostile records of one kind: one, or a few that only
// mean something together (an intent sent to two partitions).
type kindFunc func(g *gen) []hostile

// cycle returns n records of the kinds, every kind once (in a seeded order)
// before any kind repeats, so that even a small run has each kind.
func (g *gen) cycle(kinds map[string]kindFunc, n int) []hostile {
	names := slices.Sorted(maps.Keys(kinds))
	var out []hostile
	for len(out) < n && len(names) > 0 {
		g.r.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		for _, k := range names {
			if len(out) >= n {
				break
			}
			for _, h := range kinds[k](g) {
				h.kind = k
				out = append(out, h)
			}
		}
	}
	return out
}

func (g *gen) next() int { g.n++; return g.n }

func (g *gen) partition() int32 { return g.r.Int32N(g.partitions) }

func (g *gen) pick(s ...string) string { return s[g.r.IntN(len(s))] }

// encode is JSON without HTML escaping: '<' stays one byte, as a producer's
// own encoder may well write it.
func encode(v any) []byte {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		panic(err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// nasty is a string of n runes drawn from HTML, JSON-special, control,
// separator and multi-byte characters (the encoder escapes what JSON
// requires; the rest stays raw).
func (g *gen) nasty(n int) string {
	const pool = "<>&\"\\'/\x00\x01\x07\x08\x1b\x1f\u007f\u2028\u2029\ufeffé€😀</script>&amp;"
	rs := []rune(pool)
	var b strings.Builder
	for range n {
		b.WriteRune(rs[g.r.IntN(len(rs))])
	}
	return b.String()
}

// filler is about n bytes of one repeated character chosen to stress an
// encoder: plain, HTML (6 bytes once escaped by encoding/json), two-byte
// UTF-8, or an escaped control character (6 bytes as written).
func (g *gen) filler(n int) string {
	switch g.r.IntN(4) {
	case 0:
		return strings.Repeat("a", n)
	case 1:
		return strings.Repeat("<", n)
	case 2:
		return strings.Repeat("é", n/2)
	default:
		return strings.Repeat("\x01", n/6) // encoded \u0001
	}
}

// envelope is a valid event of a fresh aggregate at version 1.
func (g *gen) envelope(eventType string, payload any) map[string]any {
	i := g.next()
	return map[string]any{
		"eventId": fmt.Sprintf("hev-%d", i), "eventType": eventType,
		"aggregateId": fmt.Sprintf("hagg-%d", i), "aggregateType": "Case",
		"aggregateVersion": 1, "payload": payload,
	}
}

// event makes a record of a valid envelope on a random partition and
// remembers it for duplicates.
func (g *gen) event(env map[string]any, topic string) *kgo.Record {
	return g.eventOn(env, topic, g.partition())
}

// eventOn is event on partition p. An aggregate id the generators may use
// twice goes to one partition, as the contract asks of producers (state is
// per partition: docs/decisions/001).
func (g *gen) eventOn(env map[string]any, topic string, p int32) *kgo.Record {
	v := encode(env)
	g.seen = append(g.seen, seenEnvelope{value: v, partition: p, env: env})
	return &kgo.Record{Topic: topic, Partition: p, Key: []byte(fmt.Sprint(env["aggregateId"])), Value: v}
}

// nest wraps leaf in depth levels of arrays or objects.
func nest(depth int, leaf string, objects bool) string {
	open, close := "[", "]"
	if objects {
		open, close = `{"a":`, "}"
	}
	return strings.Repeat(open, depth) + leaf + strings.Repeat(close, depth)
}

// wrongValues are values of the wrong type, or right type and wrong value,
// for any envelope, intent or command member.
var wrongValues = []any{
	0, -1, 1.5, 3.0, "3", "", nil, true, []any{}, map[string]any{}, json.Number("1e400"),
	json.Number("9223372036854775808"), json.Number("-9223372036854775809"), json.Number("9223372036854775807"),
	[]any{"x", 1}, map[string]any{"<a>": "&"},
}

// garbage is a value that is not the JSON object a consumer wants.
func (g *gen) garbage() []byte {
	switch g.r.IntN(12) {
	case 0:
		return []byte{}
	case 1:
		return []byte("null")
	case 2:
		return []byte(`[{"eventId":"x"}]`)
	case 3:
		return []byte(`"a string"`)
	case 4:
		return []byte("{\"eventId\":\"a\xffb\"}") // invalid UTF-8
	case 5:
		return []byte("{\"eventId\":\"raw\x01control\"}") // a raw control character: not JSON
	case 6:
		return []byte("\xef\xbb\xbf{}") // a byte order mark
	case 7:
		return []byte(`{"eventId":"a","eventId":"b"}`)
	case 8:
		b := make([]byte, 1+g.r.IntN(256))
		for i := range b {
			b[i] = byte(g.r.UintN(256))
		}
		return b
	case 9:
		return []byte(nest(g.maxRecord/8, "1", g.r.IntN(2) == 0)) // beyond every decoder's limit, within the topic's
	case 10:
		return []byte("{\"a\":\x00}")
	default:
		return []byte(`{"unterminated":`)
	}
}

// truncate cuts v somewhere inside.
func (g *gen) truncate(v []byte) []byte {
	if len(v) < 2 {
		return v[:0]
	}
	return v[:1+g.r.IntN(len(v)-1)]
}

// oddHeaders are headers with odd bytes: invalid UTF-8, NUL, empty names,
// duplicates and values up to size bytes.
func (g *gen) oddHeaders(size int) []kgo.RecordHeader {
	hs := []kgo.RecordHeader{
		{Key: "\xff\xfe", Value: []byte("\xc3\x28")},
		{Key: "nul\x00name", Value: []byte{0, 0, 0}},
		{Key: "", Value: nil},
		{Key: "dup", Value: []byte("1")}, {Key: "dup", Value: []byte("2")},
		{Key: g.nasty(16), Value: []byte(g.nasty(64))},
	}
	if size > 0 {
		hs = append(hs, kgo.RecordHeader{Key: "huge", Value: bytes.Repeat([]byte{0xff}, size)})
	}
	g.r.Shuffle(len(hs), func(i, j int) { hs[i], hs[j] = hs[j], hs[i] })
	return hs[:1+g.r.IntN(len(hs))]
}

// commandHeaders mark a record as a command, with an odd header value, and
// sometimes twice.
func (g *gen) commandHeaders() []kgo.RecordHeader {
	val := [][]byte{nil, {}, []byte("\x00"), []byte("\xff"), []byte(g.nasty(8)), []byte("skip-gap"), []byte("outcome"),
		bytes.Repeat([]byte("x"), g.maxRecord/10)}[g.r.IntN(8)]
	hs := []kgo.RecordHeader{{Key: sideeffects.HeaderCommand, Value: val}}
	if g.r.IntN(4) == 0 {
		hs = append(hs, kgo.RecordHeader{Key: sideeffects.HeaderCommand, Value: []byte("resolve")})
	}
	if g.r.IntN(3) == 0 {
		hs = append(g.oddHeaders(0), hs...)
	}
	return hs
}

// forgedReceipt is a receipt-shaped value of a tenant the ingress never
// serves, under a printable key the test can look up.
func (g *gen) forgedReceipt() (*receipt.Receipt, string) {
	key := fmt.Sprintf("forged-%d-<&>", g.next())
	return &receipt.Receipt{Origin: receipt.Origin{TenantID: "forged", Key: key, Index: 0, Count: 1},
		EventID: g.nasty(8), Outcome: g.pick("applied", "bogus", "<b>"), Topic: g.nasty(4), Offset: -1}, key
}
