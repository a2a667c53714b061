package state

import (
	"strings"
	"testing"
)

// TestValueCacheKeys checks that a lookup hits only its own key, whether the
// entry holds the key in place (up to keyRoom bytes) or apart, when two keys
// share a hash (the later wins the slot), and that a committed deletion
// removes only its own key's entry.
func TestValueCacheKeys(t *testing.T) {
	c := newValueCache(64)
	short, long := "t-short-key", strings.Repeat("k", keyRoom+1)
	atRoom := strings.Repeat("r", keyRoom)
	for _, k := range []string{short, long, atRoom} {
		c.put(1, k, []byte("v-"+k)) // one hash: each put takes the slot
		if v, ok := c.get(1, []byte(k)); !ok || string(v) != "v-"+k {
			t.Fatalf("get(%q) = %q, %v after its put", k, v, ok)
		}
	}
	for _, k := range []string{short, long, atRoom[:keyRoom-1], atRoom + "x", short[:len(short)-1]} {
		if _, ok := c.get(1, []byte(k)); ok {
			t.Errorf("get(%q) hit the slot of %q", k, atRoom)
		}
	}
	c.put(2, long, []byte("v2"))
	c.committed([]committedWrite{{key: short, valued: true, hash: 2}}, false) // another key's deletion
	if v, ok := c.get(2, []byte(long)); !ok || string(v) != "v2" {
		t.Fatalf("get(long) = %q, %v after another key's deletion", v, ok)
	}
	c.committed([]committedWrite{{key: long, valued: true, hash: 2}}, false)
	if _, ok := c.get(2, []byte(long)); ok {
		t.Fatal("get(long) hit after its deletion")
	}
}
