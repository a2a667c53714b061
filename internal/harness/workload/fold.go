package workload

import "encoding/json"

// fold is the reference fold: it simulates the arrival of recs per
// aggregate and counts each outcome into exp.
func fold(recs []Record, exp *Expect) {
	type aggRef struct {
		version int64
		held    map[int64]bool
	}
	// The first record of each id; its intent is worked out only when the id
	// comes again (a tenth of the ids), which keeps the fold fast.
	type first struct {
		typ, agg string
		version  int64
		payload  json.RawMessage
	}
	seen := map[string]first{} // tenant|id → first record's intent fields
	refs := map[string]*aggRef{}
	for _, r := range recs {
		switch r.Kind {
		case KindInvalid:
			exp.Invalid++
			exp.DeadLetters[exp.DeadLetterValues[string(r.Value)]]++
			continue
		}
		var m struct {
			EventID string          `json:"eventId"`
			Agg     string          `json:"aggregateId"`
			Version int64           `json:"aggregateVersion"`
			Tenant  string          `json:"tenantId"`
			Payload json.RawMessage `json:"payload"`
			Type    string          `json:"eventType"`
		}
		if err := json.Unmarshal(r.Value, &m); err != nil {
			panic(err)
		}
		scope := m.Tenant + "|" + m.EventID
		if prev, ok := seen[scope]; ok {
			if intentOf(prev.typ, prev.agg, prev.version, prev.payload) == intentOf(m.Type, m.Agg, m.Version, m.Payload) {
				exp.Duplicates++
			} else {
				exp.Conflicts++
				exp.DeadLetters["conflict"]++
			}
			continue
		}
		seen[scope] = first{m.Type, m.Agg, m.Version, m.Payload}
		a := refs[m.Agg]
		if a == nil {
			a = &aggRef{held: map[int64]bool{}}
			refs[m.Agg] = a
		}
		switch {
		case m.Version <= a.version:
			exp.Stale++
		case m.Version == a.version+1:
			exp.Applied++
			a.version++
			for a.held[a.version+1] {
				delete(a.held, a.version+1)
				a.version++
				exp.Applied++
			}
		case a.held[m.Version]:
			exp.Stale++
		default:
			a.held[m.Version] = true
			exp.Held++
		}
	}
}

// finals folds each full history in version order into the expected final
// states.
func finals(histories [][]ev, exp *Expect) {
	for _, h := range histories {
		var st map[string]any
		deleted := false
		for _, e := range h {
			switch e.typ {
			case "CaseClosed":
				st, deleted = nil, true
			case "CaseNoted":
			default:
				if st == nil {
					st = map[string]any{}
				}
				deleted = false
				mergeInto(st, e.payload)
			}
		}
		if st == nil && !deleted {
			st = map[string]any{}
		}
		exp.Final[h[0].agg] = Final{Version: int64(len(h)), State: st, Deleted: deleted}
	}
}

// intentOf is the reference notion of "same intent": the six fingerprint
// fields compared as parsed JSON values (independent of the processor's
// RFC 8785 implementation).
func intentOf(typ, agg string, version int64, payload json.RawMessage) string {
	var p any
	_ = json.Unmarshal(payload, &p)
	b, _ := json.Marshal([]any{typ, agg, version, p})
	return string(b)
}

// mergeInto applies an RFC 7386 merge patch (reference implementation).
func mergeInto(dst map[string]any, patch map[string]any) {
	for k, v := range patch {
		if v == nil {
			delete(dst, k)
			continue
		}
		if pm, ok := v.(map[string]any); ok {
			cur, _ := dst[k].(map[string]any)
			if cur == nil {
				cur = map[string]any{}
			}
			mergeInto(cur, pm)
			dst[k] = cur
			continue
		}
		dst[k] = v
	}
}
