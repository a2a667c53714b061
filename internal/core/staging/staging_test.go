package staging

import (
	"bytes"
	"sort"
	"testing"
)

// mapKV is a base KV with Delete.
type mapKV map[string]string

func (m mapKV) Get(k []byte) ([]byte, bool, error) {
	v, ok := m[string(k)]
	return []byte(v), ok, nil
}
func (m mapKV) Set(k, v []byte) { m[string(k)] = string(v) }
func (m mapKV) Delete(k []byte) { delete(m, string(k)) }
func (m mapKV) Scan(p []byte, fn func(k, v []byte) error) error {
	var keys []string
	for k := range m {
		if bytes.HasPrefix([]byte(k), p) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := fn([]byte(k), []byte(m[k])); err != nil {
			return err
		}
	}
	return nil
}

func scan(t *testing.T, kv KV, prefix string) string {
	t.Helper()
	var b bytes.Buffer
	if err := kv.Scan([]byte(prefix), func(k, v []byte) error {
		b.WriteString(string(k) + "=" + string(v) + " ")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestOverlay(t *testing.T) {
	base := mapKV{"a1": "x", "a3": "y", "b1": "z"}
	o := New(base)
	o.Set([]byte("a2"), []byte("new"))
	o.Set([]byte("a3"), []byte("y2"))
	o.Delete([]byte("a1"))
	o.Set([]byte("a2"), []byte("newer"))
	if v, ok, _ := o.Get([]byte("a2")); !ok || string(v) != "newer" {
		t.Errorf("Get a2 = %q %v", v, ok)
	}
	if _, ok, _ := o.Get([]byte("a1")); ok {
		t.Error("a1 visible after Delete")
	}
	if v, ok, _ := o.Get([]byte("b1")); !ok || string(v) != "z" {
		t.Errorf("Get b1 = %q %v (the base)", v, ok)
	}
	if got, want := scan(t, o, "a"), "a2=newer a3=y2 "; got != want {
		t.Errorf("Scan a = %q, want %q", got, want)
	}
	if n := len(o.Writes()); n != 3 {
		t.Errorf("%d writes, want 3 (one per key)", n)
	}
	if got, want := scan(t, base, ""), "a1=x a3=y b1=z "; got != want {
		t.Errorf("base before Flush = %q, want %q", got, want)
	}
	o.Flush()
	if got, want := scan(t, base, ""), "a2=newer a3=y2 b1=z "; got != want {
		t.Errorf("base after Flush = %q, want %q", got, want)
	}
	if len(o.Writes()) != 0 {
		t.Error("writes left after Flush")
	}
}

// TestOverlayReset: Reset drops the staged writes (nothing reaches the old
// base) and reads and flushes go to the new base.
func TestOverlayReset(t *testing.T) {
	old, next := mapKV{"a": "1"}, mapKV{"b": "2"}
	o := New(old)
	o.Set([]byte("a"), []byte("dropped"))
	o.Reset(next)
	if len(o.Writes()) != 0 {
		t.Error("writes left after Reset")
	}
	if _, ok, _ := o.Get([]byte("a")); ok {
		t.Error("a (old base, dropped write) visible after Reset")
	}
	if v, ok, _ := o.Get([]byte("b")); !ok || string(v) != "2" {
		t.Errorf("Get b = %q %v, want the new base's", v, ok)
	}
	o.Set([]byte("c"), []byte("3"))
	o.Flush()
	if got, want := scan(t, old, ""), "a=1 "; got != want {
		t.Errorf("old base = %q, want %q", got, want)
	}
	if got, want := scan(t, next, ""), "b=2 c=3 "; got != want {
		t.Errorf("new base = %q, want %q", got, want)
	}
}
