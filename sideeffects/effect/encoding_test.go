package effect

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestEntryEncodingKeepsHTML: a stored entry writes <, > and & as they are,
// in its intent and in the texts from outside, and reads back the same
// entry; an entry written by json.Marshal (before issue 22, \u003c and all)
// still reads as the same entry.
func TestEntryEncodingKeepsHTML(t *testing.T) {
	kv := memKV{}
	l := NewLedger(kv, []byte("task"))
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	intent := `{"key":"k<&>","effect":"fx","event":{"payload":{"html":"<b>&amp;</b>","ctl":"\u0001\n"}}}`
	in := Intent{Key: "k<&>", Effect: "fx<&>", Value: []byte(intent)}
	if _, _, err := l.Offer(in, now); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Start(in.Key, now); err != nil {
		t.Fatal(err)
	}
	if _, err := l.MarkUnknown(in.Key, Attempt{Error: `webhook: 502 <html>Bad & "gateway"</html>`, Ref: "<ref&>"}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	want, err := l.Resolve(in.Key, Succeeded, "checked <by> hand & mail", now)
	if err != nil {
		t.Fatal(err)
	}
	stored, _, _ := kv.Get(EntryKey([]byte("task"), in.Key))
	for _, esc := range []string{`\u003c`, `\u003e`, `\u0026`} {
		if strings.Contains(string(stored), esc) {
			t.Errorf("the stored entry has %s: %s", esc, stored)
		}
	}
	for _, lit := range []string{`"key":"k<&>"`, `"effect":"fx<&>"`, `"intent":` + intent, `<html>Bad & \"gateway\"</html>`, `"ref":"<ref&>"`, `checked <by> hand & mail`} {
		if !strings.Contains(string(stored), lit) {
			t.Errorf("the stored entry lacks %s literally: %s", lit, stored)
		}
	}
	got, _, err := l.Get(in.Key)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("read back:\n %+v, %v\nwant %+v", got, err, want)
	}
	// The format before: json.Marshal's escapes, same format byte.
	old, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(old), `\u003c`) {
		t.Fatal("json.Marshal no longer escapes HTML: this check proves nothing")
	}
	kv.Set(EntryKey([]byte("task"), in.Key), append([]byte{formatV1}, old...))
	if got, _, err := l.Get(in.Key); err != nil || got.Key != want.Key || got.Resolution.Note != want.Resolution.Note ||
		got.History[0].Error != want.History[0].Error {
		t.Errorf("an entry in the old encoding read as %+v, %v", got, err)
	}
}

// memKV is the smallest KV (sideeffectstest imports this package).
type memKV map[string][]byte

func (m memKV) Get(k []byte) ([]byte, bool, error) { v, ok := m[string(k)]; return v, ok, nil }
func (m memKV) Set(k, v []byte)                    { m[string(k)] = v }
func (m memKV) Scan(p []byte, fn func(k, v []byte) error) error {
	for k, v := range m {
		if strings.HasPrefix(k, string(p)) {
			if err := fn([]byte(k), v); err != nil {
				return err
			}
		}
	}
	return nil
}
