package jsonenc

import (
	"encoding/json"
	"testing"
)

func TestAppendStringRoundTrips(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote`, `back\slash`, "nl\nx", "tab\t", "ctl\x01\x1f", "ünïcode ✓", "</script>"} {
		b := AppendString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil || got != s {
			t.Errorf("%q: encoded %s, decoded %q, err %v", s, b, got, err)
		}
		if fromBytes := AppendString([]byte("x"), []byte(s)); string(fromBytes) != "x"+string(b) {
			t.Errorf("%q: from bytes %s, from a string %s", s, fromBytes[1:], b)
		}
	}
}
