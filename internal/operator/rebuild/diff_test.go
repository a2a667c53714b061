package rebuild

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestEntryOf(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value []byte
		want  string
	}{
		{"tombstone", nil, "deleted"},
		{"record", []byte(`{"projection":"p","aggregateId":"A","version":3,"state":{"a":1},"lastEventId":"e"}`), `v3 {"a":1}`},
		{"not JSON", []byte(`nope`), "undecodable nope"},
		{"no version", []byte(`{"state":{}}`), `undecodable {"state":{}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := entryOf(tc.value).String(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCompare(t *testing.T) {
	st := func(v int64, s string) Entry { return Entry{Version: v, State: []byte(s)} }
	del := Entry{Deleted: true}
	raw := func(s string) Entry { return Entry{Raw: []byte(s)} }
	for _, tc := range []struct {
		name string
		a, b *Entry // nil: no record
		want Kind
	}{
		{"same", &Entry{Version: 2, State: []byte(`{"a":1,"b":[1,2]}`)}, &Entry{Version: 2, State: []byte(`{ "b": [1, 2.0], "a": 1 }`)}, Equal},
		{"state differs", ptr(st(2, `{"a":1}`)), ptr(st(2, `{"a":2}`)), Different},
		{"version differs", ptr(st(2, `{"a":1}`)), ptr(st(3, `{"a":1}`)), Different},
		{"array order matters", ptr(st(1, `[1,2]`)), ptr(st(1, `[2,1]`)), Different},
		{"both deleted", &del, &del, Equal},
		{"deleted vs compacted away", &del, nil, Equal},
		{"compacted away vs deleted", nil, &del, Equal},
		{"state vs tombstone", ptr(st(1, `{}`)), &del, Different},
		{"tombstone vs state", &del, ptr(st(1, `{}`)), Different},
		{"only in A", ptr(st(1, `{}`)), nil, MissingInB},
		{"only in B", nil, ptr(st(1, `{}`)), MissingInA},
		{"undecodable same", ptr(raw("x")), ptr(raw("x")), Equal},
		{"undecodable differs", ptr(raw("x")), ptr(raw("y")), Different},
		{"undecodable vs record", ptr(raw("x")), ptr(st(1, `{}`)), Different},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := map[string]Entry{}, map[string]Entry{}
			if tc.a != nil {
				a["k"] = *tc.a
			}
			if tc.b != nil {
				b["k"] = *tc.b
			}
			r := Compare(a, b, 10)
			counts := map[Kind]int{Equal: r.Equal, Different: r.Different, MissingInA: r.MissingInA, MissingInB: r.MissingInB}
			if counts[tc.want] != 1 || r.Keys != 1 {
				t.Fatalf("want %s, got %+v", tc.want, r)
			}
			if r.Identical() != (tc.want == Equal) {
				t.Errorf("Identical %v", r.Identical())
			}
			if tc.want != Equal && (len(r.Differences) != 1 || r.Differences[0].Kind != tc.want) {
				t.Errorf("differences %+v", r.Differences)
			}
		})
	}
}

func ptr(e Entry) *Entry { return &e }

func TestCompareListsSortedAndBounded(t *testing.T) {
	a := map[string]Entry{"c": {Version: 1, State: []byte(`1`)}, "a": {Version: 1, State: []byte(`1`)}, "b": {Version: 1, State: []byte(`1`)}, "same": {Version: 1}}
	b := map[string]Entry{"c": {Version: 2, State: []byte(`1`)}, "b": {Version: 1, State: []byte(`2`)}, "same": {Version: 1}, "d": {Version: 1}}
	r := Compare(a, b, 2)
	if r.Keys != 5 || r.Equal != 1 || r.Different != 2 || r.MissingInB != 1 || r.MissingInA != 1 {
		t.Fatalf("%+v", r)
	}
	if len(r.Differences) != 2 || r.Differences[0].Key != "a" || r.Differences[1].Key != "b" || !r.DifferencesTruncated {
		t.Errorf("listed %+v, truncated %v", r.Differences, r.DifferencesTruncated)
	}
	if all := Compare(a, b, -1); len(all.Differences) != 4 || all.DifferencesTruncated {
		t.Errorf("max -1 lists %d", len(all.Differences))
	}
	if none := Compare(a, b, 0); len(none.Differences) != 0 {
		t.Errorf("max 0 lists %d", len(none.Differences))
	}
	r.A, r.B = "t.v1", "t.v2"
	var sb strings.Builder
	r.Write(&sb)
	for _, want := range []string{"A=t.v1", "B=t.v2", "DIFFERENT", "different     2", "missing in A  1", "(first 2)", "a    missing in B  -      v1 1  (no record)", "b    different     state  v1 1  v1 2"} {
		if !strings.Contains(sb.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, sb.String())
		}
	}
}

func TestLatest(t *testing.T) {
	recs := []*kgo.Record{
		{Key: []byte("a"), Value: []byte(`{"version":1,"state":{"x":1}}`)},
		{Key: []byte("b"), Value: []byte(`{"version":1,"state":{}}`)},
		{Key: []byte("a"), Value: []byte(`{"version":2,"state":{"x":2}}`)},
		{Key: []byte("b")},
	}
	m := Latest(recs)
	if m["a"].Version != 2 || string(m["a"].State) != `{"x":2}` || !m["b"].Deleted || len(m) != 2 {
		t.Errorf("%+v", m)
	}
}

func TestWhat(t *testing.T) {
	e := func(v int64, s string) *Entry { return &Entry{Version: v, State: []byte(s)} }
	for _, tc := range []struct {
		a, b *Entry
		want string
	}{
		{e(1, `{"a":1,"b":{"x":1},"c":2}`), e(1, `{"a":1,"b":{"x":2},"d":2}`), "state.b,state.c,state.d"},
		{e(1, `{"a":1}`), e(2, `{"a":1}`), "version"},
		{e(1, `[1]`), e(1, `[2]`), "state"},
		{e(1, `{}`), &Entry{Deleted: true}, ""},
	} {
		if got := strings.Join(what(tc.a, tc.b), ","); got != tc.want {
			t.Errorf("what(%s, %s) = %q, want %q", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestCause(t *testing.T) {
	e := func(v int64, s, id, at string) *Entry {
		return &Entry{Version: v, State: []byte(s), LastEventID: id, OccurredAt: at}
	}
	del := &Entry{Deleted: true}
	for _, tc := range []struct {
		name string
		a, b *Entry
		want []string
	}{
		{"only in A", e(1, `{}`, "e1", ""), nil, []string{"key only in A", "B never applied", "--from"}},
		{"only in B", nil, e(1, `{}`, "e1", ""), []string{"key only in B", "A never applied"}},
		{"tombstone in B", e(3, `{}`, "e3", ""), del, []string{"tombstone in B, state in A", "time-based gap policy", "dedup retention"}},
		{"tombstone in A", del, e(3, `{}`, "e3", ""), []string{"tombstone in A, state in B"}},
		{"changed rule", e(3, `{"a":1}`, "e3", ""), e(3, `{"a":2}`, "e3", ""), []string{"same version and last event", "rules differ"}},
		{"same version, other event", e(3, `{"a":1}`, "e3", "2026-01-01T00:00:00Z"), e(3, `{"a":2}`, "x3", ""), []string{"same version from different events (A e3 occurred 2026-01-01T00:00:00Z, B x3)", "dedup retention"}},
		{"applied twice", e(4, `{"a":1}`, "e3", ""), e(5, `{"a":1}`, "e3", ""), []string{"same last event e3 at v4 in A, v5 in B", "unversioned", "applied an event twice"}},
		{"A behind", e(4, `{"a":1}`, "e4", "2026-01-01T00:00:00Z"), e(7, `{"a":2}`, "e7", "2026-01-02T00:00:00Z"), []string{"A behind B (v4, last e4 occurred 2026-01-01T00:00:00Z; B v7, last e7", "gap held in A", "time-based gap policy in B", "A not caught up"}},
		{"B behind", e(7, `{}`, "e7", ""), e(4, `{}`, "e4", ""), []string{"B behind A (v4, last e4; A v7, last e7)", "gap held in B"}},
		{"both deleted", del, del, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Cause(tc.a, tc.b)
			if tc.want == nil && got != "" {
				t.Errorf("cause %q, want none", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("cause %q lacks %q", got, w)
				}
			}
		})
	}
	// The report prints each listed key's cause.
	r := Compare(map[string]Entry{"k": *e(4, `{}`, "e4", "")}, map[string]Entry{"k": *e(5, `{}`, "e5", "")}, 10)
	var sb strings.Builder
	r.Write(&sb)
	if !strings.Contains(sb.String(), "likely causes:\n  k: A behind B") {
		t.Errorf("report:\n%s", sb.String())
	}
}
