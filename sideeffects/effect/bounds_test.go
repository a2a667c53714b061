package effect

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestWorstEntrySetsEveryField fails when Entry, Attempt or Resolution gains
// a field that worstEntry leaves at its zero value: MaxRecordBytes would
// then miss what that field adds to a stored entry. Set the new field in
// worstEntry (or worstAttempt) at its longest encoding.
func TestWorstEntrySetsEveryField(t *testing.T) {
	e := worstEntry("k", "fx", json.RawMessage(`{}`))
	var check func(path string, v reflect.Value)
	check = func(path string, v reflect.Value) {
		if v.IsZero() {
			t.Errorf("%s is not set in the worst case: MaxRecordBytes does not count it", path)
			return
		}
		switch v.Kind() {
		case reflect.Pointer:
			check(path, v.Elem())
		case reflect.Slice:
			if v.Type().Elem().Kind() == reflect.Struct {
				check(path+"[0]", v.Index(0))
			}
		case reflect.Struct:
			if v.Type() == reflect.TypeFor[time.Time]() {
				return
			}
			for i := range v.NumField() {
				check(path+"."+v.Type().Field(i).Name, v.Field(i))
			}
		}
	}
	check("Entry", reflect.ValueOf(e))
	if len(e.History) != MaxHistory {
		t.Errorf("the worst case has %d attempts, want MaxHistory (%d)", len(e.History), MaxHistory)
	}
}

// TestMaxRecordBytesIsTheWorstEntry: MaxRecordBytes, computed from one
// encoding of the worst entry plus what key, effect and intent add, equals
// the record of the worst entry with them, for keys and effects that JSON
// escapes; an intent with whitespace is stored compacted, so the bound
// holds with room to spare.
func TestMaxRecordBytesIsTheWorstEntry(t *testing.T) {
	for _, c := range []struct{ key, effect, intent string }{
		{"k", "fx", `{}`},
		{"a<b>&c", "fx&", `{}`},
		{"email:case:CASE-1:sla-breach:v3", "sla-breach-email", `{"key":"k","event":{"payload":"<<&>>"}}`},
		{"<k\x01\"\\\u2028>", "e\x7f\xff", `{"a":"` + strings.Repeat("<", 5000) + `"}`},
		{strings.Repeat("\x00", 300), "é", `[1,2,3]`},
		{"k", "fx", "{\n  \"spaced\": [1, 2]\n}"},
	} {
		e := worstEntry(c.key, c.effect, json.RawMessage(c.intent))
		v, err := encodeEntry(&e)
		if err != nil {
			t.Fatal(err)
		}
		record := 1 + len(c.key) + len(v)
		got := MaxRecordBytes(c.key, c.effect, len(c.intent))
		compact := !strings.ContainsAny(c.intent, " \n")
		if (compact && got != record) || got < record {
			t.Errorf("key %q: MaxRecordBytes %d, the worst entry's record %d", c.key, got, record)
		}
	}
	// The figure docs/contract.md gives: what the bound adds to an intent.
	t.Logf("MaxRecordBytes(\"\", \"\", 0) = %d", MaxRecordBytes("", "", 0))
}

// TestLedgerEntryStaysWithinMaxRecordBytes drives one key through every
// transition that adds to its entry, far more often than any key could
// meet them, with hostile texts from outside (errors, references and a
// note of every character JSON escapes, far over their bounds): the stored
// record never exceeds MaxRecordBytes of its intent.
func TestLedgerEntryStaysWithinMaxRecordBytes(t *testing.T) {
	kv := memKV{}
	l := NewLedger(kv, []byte("task"))
	intent := `{"key":"k<&>","effect":"fx","event":{"payload":"` + strings.Repeat("<&>", 3000) + `"}}`
	in := Intent{Key: "k<&>", Effect: "fx", Value: []byte(intent)}
	limit := MaxRecordBytes(in.Key, in.Effect, len(intent))
	// Quotes and backslashes are what JSON writes longest (two bytes each)
	// once BoundText is done; the end has one of every other kind.
	hostile := strings.Repeat("\"\\", 3000) + "\x01\u2028\xff<é; giving up after 1000 attempts"
	check := func(op string) {
		t.Helper()
		v, _, _ := kv.Get(EntryKey([]byte("task"), in.Key))
		if n := 1 + len(in.Key) + len(v); n > limit {
			t.Fatalf("after %s: the record is %d bytes, over MaxRecordBytes %d", op, n, limit)
		}
	}
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.FixedZone("", 5*3600+30*60))
	if _, _, err := l.Offer(in, now); err != nil {
		t.Fatal(err)
	}
	check("offer")
	for i := range MaxHistory + 8 { // past MaxHistory: the oldest attempts dropped
		if _, err := l.Start(in.Key, now.Add(time.Duration(i)*time.Second+123456789)); err != nil {
			t.Fatal(err)
		}
		check("start")
		a := Attempt{Duration: math.MinInt64, StatusCode: math.MinInt, Outcome: Outcome(1 + i%4), Error: hostile, Ref: hostile}
		var err error
		switch i % 3 {
		case 0:
			_, err = l.Retry(in.Key, a, now.Add(time.Hour))
		case 1:
			_, err = l.MarkUnknown(in.Key, a, now.Add(time.Hour))
		default:
			_, err = l.Settle(in.Key, i+1, a, Unknown, now.Add(time.Hour))
		}
		if err != nil {
			t.Fatal(err)
		}
		check("record")
	}
	if _, err := l.Resolve(in.Key, Succeeded, hostile, now); err != nil {
		t.Fatal(err)
	}
	check("resolve")
	e, _, err := l.Get(in.Key)
	if err != nil {
		t.Fatal(err)
	}
	last := e.History[len(e.History)-1]
	for what, s := range map[string]string{"error": last.Error, "ref": last.Ref, "note": e.Resolution.Note} {
		if !utf8.ValidString(s) || !strings.Contains(s, TruncatedMark) {
			t.Errorf("%s %q: want valid UTF-8, cut with the mark", what, s)
		}
	}
	if !strings.HasSuffix(last.Error, "; giving up after 1000 attempts") || len(last.Error) > MaxErrorBytes {
		t.Errorf("error text (%d bytes) lost its end or exceeds %d: %q", len(last.Error), MaxErrorBytes, last.Error)
	}
}

// TestBoundText: what BoundText keeps of a text, and that no text it
// returns encodes longer than worstText, the one MaxRecordBytes counts.
func TestBoundText(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"connection refused", "connection refused"},
		{"tab\tnl\ncr\r <&> é ✓", "tab\tnl\ncr\r <&> é ✓"},
		{"nul\x00 bell\x07 esc\x1b", "nul\uFFFD bell\uFFFD esc\uFFFD"},
		{"bad \xff\xfe utf8", "bad \uFFFD\uFFFD utf8"},
		{strings.Repeat("a", 20) + strings.Repeat("b", 20), strings.Repeat("a", 6) + TruncatedMark + strings.Repeat("b", 7)},
		{strings.Repeat("é", 20), strings.Repeat("é", 3) + TruncatedMark + strings.Repeat("é", 3)},
	} {
		if got := BoundText(c.in, 30); got != c.want {
			t.Errorf("BoundText(%q, 30) = %q, want %q", c.in, got, c.want)
		}
	}
	for _, c := range []struct {
		in    string
		limit int
		want  string
	}{
		{"abcdef", 4, "abcd"}, // no room for the mark: a plain cut
		{"ééé", 3, "é"},
		{"abc", 0, ""},
	} {
		if got := BoundText(c.in, c.limit); got != c.want {
			t.Errorf("BoundText(%q, %d) = %q, want %q", c.in, c.limit, got, c.want)
		}
	}
	rng := rand.New(rand.NewPCG(22, 1))
	alphabet := []string{"a", "<", "&", "\"", "\\", "\x00", "\x1f", "\n", "\t", "\x7f", "\xff", "\xe2\x80", "é", "\u2028", "✓", "😀"}
	for _, limit := range []int{MaxErrorBytes, MaxRefBytes, MaxNoteBytes, 40} {
		worst := quotedLen(worstText(limit))
		if worst > 2*limit+2 {
			t.Errorf("worstText(%d) encodes to %d bytes, over 2×limit+2", limit, worst)
		}
		for range 500 {
			var b strings.Builder
			for n := rng.IntN(3 * limit); b.Len() < n; {
				b.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
			got := BoundText(b.String(), limit)
			if len(got) > limit || !utf8.ValidString(got) || BoundText(got, limit) != got {
				t.Fatalf("BoundText(%q, %d) = %q: over the limit, not UTF-8 or not stable", b.String(), limit, got)
			}
			if q := quotedLen(got); q > worst {
				t.Fatalf("BoundText(%q, %d) encodes to %d bytes, more than worstText's %d", b.String(), limit, q, worst)
			}
		}
	}
}

// TestUnnamedOutcomeRefused: an attempt whose outcome has no name is
// refused rather than written: its entry could not be read back
// (UnmarshalText knows no "Outcome(200)"), and every later read of the
// key, a restore's included, would fail as corrupt.
func TestUnnamedOutcomeRefused(t *testing.T) {
	l := NewLedger(memKV{}, nil)
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	if _, _, err := l.Offer(Intent{Key: "k", Effect: "fx", Value: []byte(`{}`)}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Start("k", now); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Succeed("k", Attempt{Outcome: Outcome(200)}); err == nil {
		t.Error("an unnamed outcome was recorded")
	}
	if e, _, err := l.Get("k"); err != nil || e.Status != InFlight {
		t.Errorf("after the refused record: %+v, %v; want the in-flight entry, readable", e, err)
	}
}
