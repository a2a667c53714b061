package workload

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
)

// encode writes an envelope. reserialise uses another member order, extra
// spacing, \u escapes and other number spellings (same intent, other bytes).
func (g *gen) encode(e *ev, reserialise bool) []byte {
	type kv struct {
		k string
		v any
	}
	members := []kv{{"eventId", e.id}, {"eventType", e.typ}, {"aggregateId", e.agg},
		{"aggregateType", g.o.AggregateType}, {"aggregateVersion", e.version}}
	if e.tenant != "" {
		members = append(members, kv{"tenantId", e.tenant})
	}
	members = append(members, kv{"occurredAt", "2026-06-28T10:15:30Z"}, kv{"producer", "workload"})
	if e.payload != nil {
		members = append(members, kv{"payload", e.payload})
	}
	var b bytes.Buffer
	b.Grow(320)
	sp := ""
	if reserialise {
		g.rng.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
		sp = " "
	}
	b.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			b.WriteString("," + sp)
		}
		writeJSON(&b, m.k, reserialise)
		b.WriteString(":" + sp)
		writeJSON(&b, m.v, reserialise)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// writeJSON writes v; alt spells it differently but equivalently.
func writeJSON(b *bytes.Buffer, v any, alt bool) {
	switch x := v.(type) {
	case string:
		if alt && len(x) > 0 && x[0] >= 'A' && x[0] <= 'Z' {
			fmt.Fprintf(b, `"\u%04x%s"`, x[0], escape(x[1:]))
			return
		}
		b.WriteString(`"` + escape(x) + `"`)
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		if alt && x == float64(int64(x)) {
			b.WriteString(strconv.FormatInt(int64(x), 10) + ".0")
			return
		}
		b.WriteString(strconv.FormatFloat(x, 'g', -1, 64))
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if alt {
			for i, j := 0, len(keys)-1; i < j; i, j = i+1, j-1 {
				keys[i], keys[j] = keys[j], keys[i]
			}
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
				if alt {
					b.WriteString("\n  ")
				}
			}
			writeJSON(b, k, false)
			b.WriteByte(':')
			writeJSON(b, x[k], alt)
		}
		b.WriteByte('}')
	case []string:
		b.WriteByte('[')
		for i, s := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			writeJSON(b, s, alt)
		}
		b.WriteByte(']')
	default:
		panic(fmt.Sprintf("workload: cannot encode %T", v))
	}
}

// escape is s as encoding/json writes it inside quotes. Most strings here
// need nothing, so they skip the marshal.
func escape(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return string(b[1 : len(b)-1])
		}
	}
	return s
}

// invalid returns the n-th malformed record and its expected reason.
func (g *gen) invalid(n int) ([]byte, string) {
	cases := []struct{ v, reason string }{
		{`not json at all %d`, "invalid:value"},
		{`[{"eventId":"x-%d"}]`, "invalid:value"},
		{`{"eventId":"inv-%d","eventType":"CaseUpdated","aggregateVersion":1}`, "invalid:aggregateId"},
		{`{"eventId":"","eventType":"CaseUpdated","aggregateId":"A-%d","aggregateVersion":1}`, "invalid:eventId"},
		{`{"eventId":"inv-%d","eventType":"CaseUpdated","aggregateId":"A","aggregateVersion":0}`, "invalid:aggregateVersion"},
		{`{"eventId":"inv-%d","eventType":"CaseUpdated","aggregateId":"A","aggregateVersion":1.5}`, "invalid:aggregateVersion"},
		{`{"eventId":"inv-%d","eventType":7,"aggregateId":"A","aggregateVersion":1}`, "invalid:eventType"},
		{`{"eventId":"inv-%d","eventType":"CaseUpdated","aggregateId":"A","aggregateVersion":"2"}`, "invalid:aggregateVersion"},
		{`{"eventId":"inv-%d","eventType":"CaseUpdated","aggregateId":"A","aggregateVersion":3`, "invalid:value"},
		{`{"eventType":"CaseUpdated","aggregateId":"A-%d","aggregateVersion":1}`, "invalid:eventId"},
	}
	c := cases[n%len(cases)]
	return []byte(fmt.Sprintf(c.v, n)), c.reason
}
