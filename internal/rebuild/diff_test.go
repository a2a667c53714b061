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
