package wiring_test

// The hostile kinds of TestNoRecordStopsAPartition, per topic. A kind's
// name says what it attacks; the comments say what the contract wants of it.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/receipt"
	"github.com/projector-dev/projector/sideeffects"
)

// Topics and names of the property test's worker (hostilePropertyConfig).
const (
	hpName     = "hp"
	hpInput    = "hp-events"
	hpEffects  = "hp.effects"
	hpReceipts = "hp.receipts"
	hpDLQ      = "hp.dlq"
	hpProj     = "hp-cases.v1"
	// ghostEffect is an effect no rule configures: its intents are offered
	// and stay pending, so they never call out.
	ghostEffect = "ghost"
)

// single wraps one record as a kind's output.
func single(r *kgo.Record) []hostile { return []hostile{{rec: r}} }

// inputKinds attack the input topic: events, and commands (skip-gap).
func inputKinds() map[string]kindFunc {
	kinds := eventKinds()
	maps.Copy(kinds, malformedInputKinds())
	return kinds
}

// eventKinds are input records with a well-formed or nearly well-formed
// envelope: odd content, sizes at the limits, nesting, wrong types.
func eventKinds() map[string]kindFunc {
	return map[string]kindFunc{
		// Valid JSON full of HTML, control and odd characters, in every
		// string the envelope has: applied, its side effect called.
		"html-control": func(g *gen) []hostile {
			env := g.envelope(g.pick("Opened", "Updated", "Closed", "Other"), map[string]any{"text": g.nasty(64), g.nasty(4): g.nasty(8)})
			env["tenantId"], env["correlationId"], env["producer"] = g.nasty(8), g.nasty(8), "<b>&amp;"
			if g.r.IntN(2) == 0 {
				env["aggregateId"] = fmt.Sprintf("hagg-%d-%s", g.next(), g.nasty(6))
			}
			return single(g.event(env, hpInput))
		},
		// Issue 22, defect 1: 200 KB of '<' in an event whose side effect
		// runs; escaped, its ledger entry is 1.2 MB.
		"html-huge-effect": func(g *gen) []hostile {
			return single(g.event(g.envelope("Opened", map[string]any{"body": strings.Repeat("<", 200<<10)}), hpInput))
		},
		// eventId or aggregateId at 512 bytes (valid) and beyond (invalid),
		// multi-byte characters up to the boundary.
		"id-at-limit": func(g *gen) []hostile {
			env := g.envelope("Opened", map[string]any{"x": 1})
			n := []int{1, 511, 512, 513, 1024}[g.r.IntN(5)]
			id := fmt.Sprintf("lim%d-", g.next())
			p := g.partition()
			if n < len(id) {
				// A one-byte id: not unique, so later ones are duplicates,
				// conflicts or stale, all on one partition.
				id, p = "", 0
			}
			id += strings.Repeat("é", (n-len(id))/2)
			id += strings.Repeat("a", n-len(id))
			env[g.pick("eventId", "aggregateId")] = id
			return single(g.eventOn(env, hpInput, p))
		},
		// A value at, just under and just over kafka.maxRecordBytes.
		"near-max-value": func(g *gen) []hostile {
			env := g.envelope(g.pick("Opened", "Other"), map[string]any{"pad": ""})
			target := g.maxRecord + []int{-4096, -1, 0, 1, 8 << 10}[g.r.IntN(5)]
			env["payload"] = map[string]any{"pad": g.padTo(target - len(encode(env)))}
			return single(g.event(env, hpInput))
		},
		// A side-effect key built from the payload: hundreds of KB, so the
		// ledger's record (key and entry) outgrows the intent the processor
		// checked.
		"long-intent-key": func(g *gen) []hostile {
			size := g.maxRecord/5 + g.r.IntN(g.maxRecord*4/5)
			return single(g.event(g.envelope("Flagged", map[string]any{"ref": g.filler(size)}), hpInput))
		},
		// Payload nesting at, and beyond, the 64-level limit.
		"deep-nesting": func(g *gen) []hostile {
			d := []int{62, 63, 64, 65, 200}[g.r.IntN(5)]
			env := g.envelope("Opened", nil)
			env["payload"] = json.RawMessage(nest(d, `"<&>"`, g.r.IntN(2) == 0))
			return single(g.event(env, hpInput))
		},
		"wrong-type": func(g *gen) []hostile {
			env := g.envelope("Opened", map[string]any{"x": 1})
			m := []string{"eventId", "eventType", "aggregateId", "aggregateType", "aggregateVersion", "tenantId", "occurredAt",
				"correlationId", "causationId", "producer"}
			member, val := m[g.r.IntN(len(m))], wrongValues[g.r.IntN(len(wrongValues))]
			env[member] = val
			p := g.partition()
			if _, ok := val.(string); ok && member == "aggregateId" {
				p = 0 // a valid id the kind may send again: one partition
			}
			return single(g.eventOn(env, hpInput, p))
		},
	}
}

// malformedInputKinds are input records that are no envelope, odd headers
// (the command and ingress headers among them), versions out of range, and
// repeats.
func malformedInputKinds() map[string]kindFunc {
	return map[string]kindFunc{
		"truncated": func(g *gen) []hostile {
			r := g.event(g.envelope("Opened", map[string]any{"t": g.nasty(32)}), hpInput)
			r.Value = g.truncate(r.Value)
			return single(r)
		},
		"garbage": func(g *gen) []hostile {
			return single(&kgo.Record{Topic: hpInput, Partition: g.partition(), Key: []byte(g.nasty(4)), Value: g.garbage()})
		},
		"tombstone-empty-key": func(g *gen) []hostile {
			keys := [][]byte{nil, {}, []byte(g.nasty(3))}
			return single(&kgo.Record{Topic: hpInput, Partition: g.partition(), Key: keys[g.r.IntN(3)]})
		},
		// A valid event under headers with odd bytes: headers other than
		// the worker's own mean nothing to it.
		"odd-headers": func(g *gen) []hostile {
			r := g.event(g.envelope("Opened", map[string]any{"h": 1}), hpInput)
			r.Headers = g.oddHeaders([]int{0, 1 << 10, g.maxRecord * 3 / 10}[g.r.IntN(3)])
			if g.r.IntN(3) == 0 {
				r.Key = nil
			}
			return single(r)
		},
		// A projector-command header (empty, odd or repeated value) on a
		// value that is no skip-gap it can apply: dead-lettered.
		"command-bad": func(g *gen) []hostile {
			return []hostile{{rec: &kgo.Record{Topic: hpInput, Partition: g.partition(), Key: []byte(g.nasty(3)),
				Value: g.badSkipGap(), Headers: g.commandHeaders()}, ownDeadLetter: true}}
		},
		// A valid event with a projector-ingress header the ingress never
		// wrote: malformed, odd characters, a huge key or tenant.
		"ingress-header": func(g *gen) []hostile {
			r := g.event(g.envelope("Opened", map[string]any{"i": 1}), hpInput)
			r.Headers = []kgo.RecordHeader{{Key: receipt.Header, Value: g.badOrigin()}}
			// Sometimes twice, as long as the record still fits the
			// limit (two of the huge ones would not: the broker, not
			// the worker, would refuse it).
			if v := g.badOrigin(); g.r.IntN(4) == 0 && len(v)+len(r.Headers[0].Value) < g.maxRecord*8/10 {
				r.Headers = append(r.Headers, kgo.RecordHeader{Key: receipt.Header, Value: v})
			}
			return single(r)
		},
		"version-extremes": func(g *gen) []hostile {
			env := g.envelope("Updated", map[string]any{"v": 1})
			vs := []any{-1, 0, 2, 3, int64(1) << 40, json.Number("9223372036854775807"), json.Number("9223372036854775808"),
				1.5, "2", json.Number("2.0"), json.Number("1e3")}
			env["aggregateVersion"] = vs[g.r.IntN(len(vs))]
			return single(g.event(env, hpInput))
		},
		"no-version": func(g *gen) []hostile {
			env := g.envelope("Opened", map[string]any{"n": g.nasty(4)})
			delete(env, "aggregateVersion")
			return single(g.event(env, hpInput))
		},
		// An earlier hostile envelope again: as it was (duplicate),
		// re-serialised (duplicate), or with another payload (conflict).
		"duplicate-conflict": func(g *gen) []hostile {
			if len(g.seen) == 0 {
				return single(g.event(g.envelope("Opened", map[string]any{"d": 1}), hpInput))
			}
			s := g.seen[g.r.IntN(len(g.seen))]
			v := s.value
			switch g.r.IntN(3) {
			case 1:
				var b bytes.Buffer
				e := json.NewEncoder(&b)
				e.SetEscapeHTML(false) // '<' stays one byte: the copy fits where the original did
				e.SetIndent("", " ")
				if err := e.Encode(s.env); err != nil {
					panic(err)
				}
				v = b.Bytes()
				if len(v) > g.maxRecord {
					v = s.value // indenting made it too large for the topic: send it as it was
				}
			case 2:
				env := maps.Clone(s.env)
				env["payload"] = map[string]any{"conflict": g.next()}
				v = encode(env)
			}
			return single(&kgo.Record{Topic: hpInput, Partition: s.partition, Value: v})
		},
	}
}

// padTo is a JSON string's content that encodes to n bytes (at least 0),
// in one of filler's characters.
func (g *gen) padTo(n int) string {
	unit := []struct {
		s   string
		enc int
	}{{"a", 1}, {"<", 1}, {"é", 2}, {"\x01", 6}}[g.r.IntN(4)]
	if n <= 0 {
		return ""
	}
	return strings.Repeat(unit.s, n/unit.enc) + strings.Repeat("a", n%unit.enc)
}

// badSkipGap is the value of an input command that can never apply.
func (g *gen) badSkipGap() []byte {
	valid := fmt.Appendf(nil, `{"op":"skip-gap","aggregate":"nohold-%d"}`, g.next())
	switch g.r.IntN(10) {
	case 0:
		return valid // no such held aggregate
	case 1:
		return fmt.Appendf(nil, `{"op":"skip-gap","aggregate":"nohold-%d","projection":"%s"}`, g.next(), "nope")
	case 2:
		return []byte(`{"op":"skip-gap"}`)
	case 3:
		return encode(map[string]any{"op": g.nasty(6), "aggregate": "x"})
	case 4:
		return encode(map[string]any{"op": wrongValues[g.r.IntN(len(wrongValues))], "aggregate": wrongValues[g.r.IntN(len(wrongValues))]})
	case 5:
		return g.truncate(valid)
	case 6:
		return nil
	case 7:
		return encode(g.envelope("Opened", map[string]any{"x": 1})) // an event marked as a command
	case 8:
		return encode(map[string]any{"op": "skip-gap", "aggregate": g.nasty(600), "note": g.nasty(2000)})
	default:
		return g.garbage()
	}
}

// badOrigin is a projector-ingress header value the ingress never writes.
func (g *gen) badOrigin() []byte {
	switch g.r.IntN(6) {
	case 0:
		return g.garbage()
	case 1:
		return encode(receipt.Origin{Key: g.nasty(20), TenantID: g.nasty(5), Index: 0, Count: 1})
	case 2:
		return encode(receipt.Origin{Key: "k", Index: 5, Count: 1})
	case 3:
		return encode(map[string]any{"key": 1, "index": "0", "count": nil})
	case 4:
		return encode(receipt.Origin{Key: g.filler(g.maxRecord*3/10 + g.r.IntN(g.maxRecord*3/10)), Index: 0, Count: 1})
	default:
		return encode(receipt.Origin{Key: "k", TenantID: g.filler(g.maxRecord * 4 / 10), Index: 0, Count: 1})
	}
}

// intent is an intents-topic value (docs/contract.md#side-effect-intents-topic).
func intent(key, effect string, event any) []byte {
	return encode(map[string]any{"key": key, "effect": effect, "projection": "hp", "aggregateId": "x",
		"aggregateVersion": 1, "eventId": "e", "event": event})
}

// effectsKinds attack the effects topic: intents, and the resolve and
// outcome commands.
func effectsKinds() map[string]kindFunc {
	return map[string]kindFunc{
		// A well-formed intent with HTML and control characters; for the
		// configured effect only printable keys (an HTTP header must carry
		// the key).
		"intent-html-control": func(g *gen) []hostile {
			key, eff := fmt.Sprintf("hk-%d-<&>\"", g.next()), "notify"
			if g.r.IntN(2) == 0 {
				key, eff = fmt.Sprintf("hk-%d-%s", g.next(), g.nasty(8)), ghostEffect
				g.ghostKeys = append(g.ghostKeys, key)
			}
			return g.effectRecord(key, intent(key, eff, map[string]any{"t": g.nasty(64)}), nil)
		},
		// Defect 1 on the executor's own input: 200 KB of '<'.
		"intent-html-huge": func(g *gen) []hostile {
			key := fmt.Sprintf("hh-%d", g.next())
			return g.effectRecord(key, intent(key, ghostEffect, map[string]any{"body": strings.Repeat("<", 200<<10)}), nil)
		},
		"intent-long-key": func(g *gen) []hostile {
			key := fmt.Sprintf("lk-%d-", g.next()) + g.filler(g.maxRecord/20+g.r.IntN(g.maxRecord/3))
			return g.effectRecord(key, intent(key, ghostEffect, nil), nil)
		},
		// An intent at, just under and just over kafka.maxRecordBytes (the
		// effects topic takes up to 16 KiB more).
		"intent-near-max": func(g *gen) []hostile {
			key := fmt.Sprintf("nm-%d", g.next())
			base := len(intent(key, ghostEffect, ""))
			target := g.maxRecord + []int{-4096, -1, 0, 1, 8 << 10}[g.r.IntN(5)]
			return g.effectRecord(key, intent(key, ghostEffect, g.padTo(target-base)), nil)
		},
		"intent-wrong-type": func(g *gen) []hostile {
			m := map[string]any{"key": fmt.Sprintf("wt-%d", g.next()), "effect": ghostEffect, "event": map[string]any{}}
			m[g.pick("key", "effect", "event", "aggregateVersion")] = wrongValues[g.r.IntN(len(wrongValues))]
			return g.effectRecord(fmt.Sprint(m["key"]), encode(m), nil)
		},
		"intent-empty-key": func(g *gen) []hostile {
			return g.effectRecord("", intent("", g.pick("notify", ghostEffect, ""), nil), nil)
		},
		"intent-truncated": func(g *gen) []hostile {
			key := fmt.Sprintf("tr-%d", g.next())
			return g.effectRecord(key, g.truncate(intent(key, ghostEffect, map[string]any{"t": g.nasty(16)})), nil)
		},
		"intent-garbage": func(g *gen) []hostile { return g.effectRecord(g.nasty(3), g.garbage(), nil) },
		"intent-tombstone": func(g *gen) []hostile {
			return g.effectRecord([]string{"", "ts", g.nasty(3)}[g.r.IntN(3)], nil, nil)
		},
		"intent-deep": func(g *gen) []hostile {
			key := fmt.Sprintf("dp-%d", g.next())
			d := []int{63, 64, 65, 1000, 20000}[g.r.IntN(5)]
			v := bytes.Replace(intent(key, ghostEffect, "EVENT"), []byte(`"EVENT"`), []byte(nest(d, "1", g.r.IntN(2) == 0)), 1)
			return g.effectRecord(key, v, nil) // spliced: the encoder refuses more than 10000 levels
		},
		// An intent whose record key is not its key, on a partition other
		// than the key's, and the same intent on the key's own partition.
		"intent-misrouted": func(g *gen) []hostile {
			key := fmt.Sprintf("mis-%d", g.next())
			v := intent(key, "notify", map[string]any{"m": 1})
			a, b := g.partition(), g.partition()
			for g.partitions > 1 && b == a {
				b = g.partition()
			}
			return []hostile{
				{rec: &kgo.Record{Topic: hpEffects, Partition: a, Key: []byte(key), Value: v}},
				{rec: &kgo.Record{Topic: hpEffects, Partition: b, Key: []byte("elsewhere"), Value: v}},
			}
		},
		// A projector-command header (odd values) on a resolve or outcome
		// that cannot apply: dead-lettered. Among them the defect 2,
		// {"op":"outcome","as":"in-flight","attempt":1,"result":{}}.
		"fx-command-bad": func(g *gen) []hostile {
			key := fmt.Sprintf("nokey-%d", g.next())
			if len(g.ghostKeys) > 0 && g.r.IntN(2) == 0 {
				key = g.ghostKeys[g.r.IntN(len(g.ghostKeys))] // pending: nothing may settle it
			}
			return []hostile{{rec: &kgo.Record{Topic: hpEffects, Partition: g.partition(), Key: []byte(key),
				Value: g.badEffectsCommand(), Headers: g.commandHeaders()}, ownDeadLetter: true}}
		},
	}
}

// effectRecord is one record on the effects topic (a random partition),
// a third of them under headers with odd bytes (never the command header:
// an intent it stays).
func (g *gen) effectRecord(key string, value []byte, hs []kgo.RecordHeader) []hostile {
	if hs == nil && len(key)+len(value) < g.maxRecord/2 && g.r.IntN(3) == 0 { // within the topic's limit
		hs = g.oddHeaders([]int{0, 1 << 10, g.maxRecord / 10}[g.r.IntN(3)])
	}
	return single(&kgo.Record{Topic: hpEffects, Partition: g.partition(), Key: []byte(key), Value: value, Headers: hs})
}

var statusNames = []string{"succeeded", "failed", "pending", "in-flight", "unknown", "SUCCEEDED", "", "<b>"}

// badEffectsCommand is a resolve or outcome command that cannot apply: its
// key is unknown or pending, its status, attempt or result malformed.
func (g *gen) badEffectsCommand() []byte {
	switch g.r.IntN(7) {
	case 0:
		return encode(map[string]any{"op": "resolve", "as": g.pick(statusNames...), "note": g.nasty(g.r.IntN(3000))})
	case 1:
		// Issue 22, defect 2, as the issue gives it.
		return []byte(`{"op":"outcome","as":"in-flight","attempt":1,"result":{}}`)
	case 2:
		// A well-formed report of an attempt the ledger does not have (no
		// such key, or a pending one): it cannot apply.
		return encode(map[string]any{"op": "outcome", "as": g.pick("succeeded", "failed", "pending", "unknown"),
			"attempt": []any{1, 2, int64(1) << 40}[g.r.IntN(3)],
			"result":  []any{map[string]any{}, map[string]any{"n": 1, "outcome": "succeeded", "error": g.nasty(100)}}[g.r.IntN(2)]})
	case 3:
		m := map[string]any{"op": "outcome", "as": g.pick(statusNames...),
			"attempt": []any{-1, 0, 1, json.Number("1e30"), "1"}[g.r.IntN(5)]}
		switch g.r.IntN(4) {
		case 0:
			m["result"] = map[string]any{"outcome": "bogus"}
		case 1:
			m["result"] = "x"
		case 2:
			m["result"] = nil
		}
		if g.r.IntN(2) == 0 {
			m["next"] = g.pick("bad", "")
		}
		return encode(m)
	case 4:
		return encode(map[string]any{"op": g.pick("retry", "<op>", "", "RESOLVE"), "as": "succeeded"})
	case 5:
		return g.truncate(encode(map[string]any{"op": "outcome", "as": "succeeded", "attempt": 1, "result": map[string]any{}}))
	default:
		if g.r.IntN(2) == 0 {
			return nil
		}
		return g.garbage()
	}
}

// receiptKinds attack the receipts topic the ingress reads.
func receiptKinds() map[string]kindFunc {
	// Headers mean nothing to the view: a third carry odd ones, the
	// command header among them.
	rec := func(g *gen, key, value []byte) *kgo.Record {
		r := &kgo.Record{Topic: hpReceipts, Partition: g.partition(), Key: key, Value: value}
		if g.r.IntN(3) == 0 {
			r.Headers = g.commandHeaders()
		}
		return r
	}
	return map[string]kindFunc{
		"receipt-garbage": func(g *gen) []hostile {
			v := g.garbage()
			for len(v) == 0 {
				v = g.garbage() // an empty value reads as a tombstone: receipt-tombstone has those
			}
			return single(rec(g, []byte(g.nasty(4)), v))
		},
		"receipt-wrong-type": func(g *gen) []hostile {
			m := map[string]any{"key": "k", "count": 1, "index": 0}
			wrong := map[string][]any{ // each value makes the receipt unreadable
				"key": {1, true, []any{}, map[string]any{}, ""}, "count": {"1", true, 1.5, -1, 0, json.Number("1e400")},
				"index": {"0", true, 1.5, []any{}}, "tenantId": {1, []any{}}, "projections": {"x", 1, []any{1}, map[string]any{"a": 1}},
			}
			f := g.pick("key", "count", "index", "tenantId", "projections")
			m[f] = wrong[f][g.r.IntN(len(wrong[f]))]
			return single(rec(g, []byte("wt"), encode(m)))
		},
		"receipt-truncated": func(g *gen) []hostile {
			r, _ := g.forgedReceipt()
			return single(rec(g, nil, g.truncate(r.Encode())))
		},
		"receipt-tombstone": func(g *gen) []hostile {
			return single(rec(g, []byte(g.pick("", "k", "forged\nk\n0")), nil))
		},
		// Well-formed receipts the processor never wrote: the view takes
		// them in (the receipts topic is trusted; see the report).
		"receipt-forged": func(g *gen) []hostile {
			r, key := g.forgedReceipt()
			if g.r.IntN(3) == 0 {
				r.Reason = g.filler(g.maxRecord / 2)
			}
			h := single(rec(g, []byte(receipt.Key(r.TenantID, r.Key, r.Index)), encode(r)))
			h[0].forged = key
			return h
		},
	}
}

// validIntent is the effects-topic record of a valid direct intent for the
// configured effect.
func validIntent(key string, partition int32) *kgo.Record {
	return &kgo.Record{Topic: hpEffects, Partition: partition, Key: []byte(key),
		Value: intent(key, "notify", map[string]any{"valid": true})}
}

// isCommand reports whether r carries the projector-command header.
func isCommand(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == sideeffects.HeaderCommand {
			return true
		}
	}
	return false
}
