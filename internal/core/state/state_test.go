package state

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

func open(t *testing.T) *Store {
	t.Helper()
	s, err := Open("mem", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestNeverAheadUntilCommit: staged writes are visible to the txn only, and
// reach the store (with the changelog offset) only on Commit
// (docs/design.md#behind-kafka, docs/design.md#atomic-task-commit).
func TestNeverAheadUntilCommit(t *testing.T) {
	s := open(t)
	task := Task{Topic: "in", Partition: 2}
	k := append(task.Prefix(), 'a', 'x')
	txn := s.NewTxn()
	txn.Set(k, []byte("v1"))
	if v, ok, _ := txn.Get(k); !ok || string(v) != "v1" {
		t.Fatal("read-your-writes failed")
	}
	if _, ok, _ := s.Get(k); ok {
		t.Fatal("store is ahead of the commit")
	}
	txn.SetChangelogOffset(task, 42)
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	if v, ok, _ := s.Get(k); !ok || string(v) != "v1" {
		t.Fatal("commit did not write")
	}
	if off, _ := s.ChangelogOffset(task); off != 42 {
		t.Fatalf("changelog offset %d, want 42", off)
	}
}

// TestScanOverlay: Scan merges staged writes and deletions over the store in
// key order.
func TestScanOverlay(t *testing.T) {
	s := open(t)
	base := s.NewTxn()
	for _, k := range []string{"p1", "p3", "p5", "q1"} {
		base.Set([]byte(k), []byte("old-"+k))
	}
	if err := base.Commit(); err != nil {
		t.Fatal(err)
	}
	txn := s.NewTxn()
	txn.Set([]byte("p2"), []byte("new-p2"))
	txn.Set([]byte("p3"), []byte("new-p3"))
	txn.Delete([]byte("p5"))
	txn.Set([]byte("p6"), []byte("new-p6"))
	var got []string
	if err := txn.Scan([]byte("p"), func(k, v []byte) error {
		got = append(got, string(k)+"="+string(v))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := "[p1=old-p1 p2=new-p2 p3=new-p3 p6=new-p6]"
	if s := fmtSlice(got); s != want {
		t.Fatalf("scan %s, want %s", s, want)
	}
}

// TestKeysAndReset: task keys split back, and Reset removes a task's state
// and offset atomically without touching another task.
func TestKeysAndReset(t *testing.T) {
	s := open(t)
	a, b := Task{Topic: "in", Partition: 1}, Task{Topic: "in", Partition: 10}
	txn := s.NewTxn()
	txn.Set(append(a.Prefix(), 'k'), []byte("a"))
	txn.Set(append(b.Prefix(), 'k'), []byte("b"))
	txn.SetChangelogOffset(a, 7)
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	if rest, ok := changelogKey(append(a.Prefix(), 'k')); !ok || string(rest) != "k" {
		t.Fatalf("changelog key: %q %v, want k", rest, ok)
	}
	if rest, ok := changelogKey(offsetKey(a)); ok {
		t.Fatalf("changelog key of an offset key: %q, want none", rest)
	}
	if err := s.Reset(a); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Get(append(a.Prefix(), 'k')); ok {
		t.Fatal("reset left a key")
	}
	if off, _ := s.ChangelogOffset(a); off != 0 {
		t.Fatalf("reset left offset %d", off)
	}
	if _, ok, _ := s.Get(append(b.Prefix(), 'k')); !ok {
		t.Fatal("reset touched another task")
	}
}

func fmtSlice(s []string) string {
	out := "["
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out + "]"
}

// TestKeyFilter: every key written (by a commit or a restore) or found at
// open passes the filter, and a store reopened on the same directory reads
// them back; most keys never written are rejected without Pebble.
func TestKeyFilter(t *testing.T) {
	f := newKeyFilterSized(1000)
	f.complete.Store(true)
	const n = 5000 // layers of 1000, 2000 and 4000 keys
	for i := range n {
		f.Add(fmt.Appendf(nil, "key-%d", i))
	}
	if got := len(*f.layers.Load()); got < 3 {
		t.Fatalf("layers: %d, want ≥ 3 after %d keys", got, n)
	}
	for i := range n {
		if !f.MayContain(fmt.Appendf(nil, "key-%d", i)) {
			t.Fatalf("key-%d was added but is rejected", i)
		}
	}
	fp := 0
	for i := range 100000 {
		if f.MayContain(fmt.Appendf(nil, "absent-%d", i)) {
			fp++
		}
	}
	if fp > 2000 { // 2%: the layers' rates add up
		t.Fatalf("false positives: %d of 100000", fp)
	}
	t.Logf("%d keys in %d layers; %d false positives in 100000 absent keys", n, len(*f.layers.Load()), fp)

	dir := t.TempDir()
	st, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The opening scan (of an empty store) is done: from here on only the
	// commit and the restore below add keys.
	st.waitKeyScan()
	task := Task{Topic: "in", Partition: 0}
	txn := st.NewTxn()
	key := append(task.Prefix(), "agg-1"...)
	restored := append(Task{Topic: "in", Partition: 1}.Prefix(), "agg-2"...)
	txn.Set(key, []byte("v1"))
	txn.SetChangelogOffset(task, 7)
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := st.Restore(Task{Topic: "in", Partition: 1}, []Record{{Key: []byte("agg-2"), Value: []byte("v2")}}, 3); err != nil {
		t.Fatal(err)
	}
	for _, k := range [][]byte{key, restored} {
		if !st.keys.MayContain(k) {
			t.Fatalf("%q was written but the filter rejects it", k)
		}
	}
	if st.keys.MayContain(append(task.Prefix(), "agg-x"...)) {
		t.Fatal("the filter passes a key never written (3 keys in a 1M-key layer)")
	}
	if v, ok, err := st.Get(key); err != nil || !ok || string(v) != "v1" {
		t.Fatalf("committed key: %q %v %v", v, ok, err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.waitKeyScan()
	if v, ok, err := st.Get(key); err != nil || !ok || string(v) != "v1" {
		t.Fatalf("after reopen: %q %v %v", v, ok, err)
	}
	if v, ok, err := st.Get(restored); err != nil || !ok || string(v) != "v2" {
		t.Fatalf("restored key after reopen: %q %v %v", v, ok, err)
	}
	if off, err := st.ChangelogOffset(task); err != nil || off != 7 {
		t.Fatalf("changelog offset after reopen: %d %v", off, err)
	}
}

// TestKeyFilterCountsKeys: a key added again (every commit of a hot
// aggregate) does not use up the filter's capacity.
func TestKeyFilterCountsKeys(t *testing.T) {
	st, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.waitKeyScan()
	key := append(Task{Topic: "in", Partition: 0}.Prefix(), "agg-1"...)
	for i := range 3000 {
		txn := st.NewTxn()
		txn.Set(key, fmt.Appendf(nil, "v%d", i))
		if err := txn.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	f := newKeyFilterSized(1000)
	for range 15000 {
		f.Add(key)
	}
	for name, f := range map[string]*keyFilter{"store": st.keys, "filter": f} {
		ls := *f.layers.Load()
		if len(ls) != 1 || ls[0].n.Load() != 1 {
			t.Errorf("%s: one key added many times: %d layers, %d keys counted; want 1 and 1", name, len(ls), ls[0].n.Load())
		}
	}
}

// TestChangelogOffsetAfterCommits: with every key cached (Options.Cached
// nil), a commit refreshes a changelog offset that a read brought into the
// value cache.
func TestChangelogOffsetAfterCommits(t *testing.T) {
	st, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	task := Task{Topic: "in", Partition: 0}
	for _, next := range []int64{5, 9, 12} {
		txn := st.NewTxn()
		txn.Set(append(task.Prefix(), "k"...), []byte("v"))
		txn.SetChangelogOffset(task, next)
		if err := txn.Commit(); err != nil {
			t.Fatal(err)
		}
		if off, err := st.ChangelogOffset(task); err != nil || off != next {
			t.Fatalf("changelog offset after the commit of %d: %d %v", next, off, err)
		}
	}
}

// cachedValue is k's entry in the value cache.
func cachedValue(st *Store, k []byte) ([]byte, bool) { return st.cache.get(keyHash(k), k) }

// TestCachedSelection: with Options.Cached, only the selected keys enter the
// value cache – on read and on commit – and a commit keeps them current.
func TestCachedSelection(t *testing.T) {
	st, err := Open(t.TempDir(), Options{Cached: func(ck []byte) bool { return len(ck) > 0 && ck[0] == 'a' }})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	task := Task{Topic: "in", Partition: 0}
	pre := task.Prefix()
	agg, mark := append(append([]byte(nil), pre...), "a1"...), append(append([]byte(nil), pre...), "d1"...)
	txn := st.NewTxn()
	txn.Set(agg, []byte("v1"))
	txn.Set(mark, []byte("m1"))
	txn.SetChangelogOffset(task, 5)
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	if v, ok := cachedValue(st, agg); !ok || string(v) != "v1" {
		t.Fatalf("selected key after commit: cached %q %v, want v1", v, ok)
	}
	for _, k := range [][]byte{mark, offsetKey(task)} {
		if _, ok := cachedValue(st, k); ok {
			t.Fatalf("an unselected key (%q) entered the cache on commit", k)
		}
	}
	// Only the selected key is in the key filter (expired dedup marks must
	// not grow it); the offset key is not task-owned, so not selected.
	var inFilter int64
	for _, l := range *st.keys.layers.Load() {
		inFilter += l.n.Load()
	}
	if inFilter != 1 {
		t.Fatalf("key filter holds %d keys, want 1 (the selected one)", inFilter)
	}
	st.cache.clear()
	for _, k := range [][]byte{agg, mark} {
		if _, ok, err := st.Get(k); !ok || err != nil {
			t.Fatalf("get %q: %v %v", k, ok, err)
		}
	}
	if _, ok := cachedValue(st, agg); !ok {
		t.Fatal("a selected key read from Pebble was not cached")
	}
	if _, ok := cachedValue(st, mark); ok {
		t.Fatal("an unselected key entered the cache on read")
	}
	txn = st.NewTxn()
	txn.Set(agg, []byte("v2"))
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := st.Get(agg); string(v) != "v2" {
		t.Fatalf("after a second commit: %q, want v2", v)
	}
	txn = st.NewTxn()
	txn.Delete(agg)
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := st.Get(agg); ok {
		t.Fatal("a deleted key is still read")
	}
}

// TestFilterOnlySelection: keys Options.FilterOnly narrows enter the key
// filter (a read of one never written is answered without Pebble) but not
// the value cache, on commit or on read.
func TestFilterOnlySelection(t *testing.T) {
	st, err := Open(t.TempDir(), Options{
		Cached:     func(ck []byte) bool { return len(ck) > 0 && (ck[0] == 'a' || ck[0] == 'h') },
		FilterOnly: func(ck []byte) bool { return len(ck) > 0 && ck[0] == 'h' },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	task := Task{Topic: "in", Partition: 0}
	pre := task.Prefix()
	agg, held := append(append([]byte(nil), pre...), "a1"...), append(append([]byte(nil), pre...), "h1"...)
	txn := st.NewTxn()
	txn.Set(agg, []byte("v1"))
	txn.Set(held, []byte("e1"))
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, ok := cachedValue(st, agg); !ok {
		t.Fatal("a cached key did not enter the value cache on commit")
	}
	if _, ok := cachedValue(st, held); ok {
		t.Fatal("a filter-only key entered the value cache on commit")
	}
	var inFilter int64
	for _, l := range *st.keys.layers.Load() {
		inFilter += l.n.Load()
	}
	if inFilter != 2 {
		t.Fatalf("key filter holds %d keys, want 2 (both selected keys)", inFilter)
	}
	if v, ok, err := st.Get(held); !ok || err != nil || string(v) != "e1" {
		t.Fatalf("get held: %q %v %v", v, ok, err)
	}
	if _, ok := cachedValue(st, held); ok {
		t.Fatal("a filter-only key entered the value cache on read")
	}
	if !st.keys.mayContain(keyHash(held)) {
		t.Fatal("a filter-only key is missing from the key filter")
	}
}

// TestMarkMatchedRestampsWithoutClearingTheCache: MarkMatched moves the
// task's match time (its position read afterwards shows the new time, not a
// cached old one) and leaves the other cached values in place.
func TestMarkMatchedRestampsWithoutClearingTheCache(t *testing.T) {
	clock := time.Unix(1_700_000_000, 0)
	st, err := Open(t.TempDir(), Options{Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	task := Task{Topic: "in", Partition: 0}
	agg := append(task.Prefix(), "a1"...)
	txn := st.NewTxn()
	txn.Set(agg, []byte("v1"))
	txn.SetChangelogOffset(task, 7)
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, at, ok, err := st.ChangelogPosition(task); err != nil || !ok || !at.Equal(clock) {
		t.Fatalf("position before: %v %v %v", at, ok, err)
	}
	if _, ok, err := st.Get(agg); !ok || err != nil { // a read caches it (no Cached selection)
		t.Fatalf("get: %v %v", ok, err)
	}
	clock = clock.Add(time.Hour)
	if err := st.MarkMatched(task); err != nil {
		t.Fatal(err)
	}
	next, at, ok, err := st.ChangelogPosition(task)
	if err != nil || !ok || next != 7 || !at.Equal(clock) {
		t.Fatalf("position after MarkMatched: next %d at %v (%v %v), want 7 at %v", next, at, ok, err, clock)
	}
	if v, ok := cachedValue(st, agg); !ok || string(v) != "v1" {
		t.Fatalf("MarkMatched dropped a cached value: %q %v", v, ok)
	}
}

// TestRestoreForgetsOnlyItsKeys: a restore batch drops the cached values of
// the keys it writes – a read afterwards sees the restored value, not the one
// cached before – and leaves another task's cached values in place (a standby
// replica restores tasks the loop does not own while the loop's hot
// aggregates stay cached).
func TestRestoreForgetsOnlyItsKeys(t *testing.T) {
	st, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	owned, standby := Task{Topic: "in", Partition: 0}, Task{Topic: "in", Partition: 1}
	hot, replaced := append(owned.Prefix(), "a1"...), append(standby.Prefix(), "a1"...)
	txn := st.NewTxn()
	txn.Set(hot, []byte("hot"))
	txn.Set(replaced, []byte("old"))
	txn.SetChangelogOffset(owned, 3)
	txn.SetChangelogOffset(standby, 3)
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, k := range [][]byte{hot, replaced} {
		if _, ok, err := st.Get(k); !ok || err != nil { // a read caches it
			t.Fatalf("get %q: %v %v", k, ok, err)
		}
	}
	if err := st.Restore(standby, []Record{{Key: []byte("a1"), Value: []byte("new")}}, 9); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := st.Get(replaced); err != nil || !ok || string(v) != "new" {
		t.Fatalf("restored key reads %q (%v %v), want new", v, ok, err)
	}
	if v, ok := cachedValue(st, hot); !ok || string(v) != "hot" {
		t.Fatalf("a restore of %s dropped %s's cached value: %q %v", standby, owned, v, ok)
	}
	if next, err := st.ChangelogOffset(standby); err != nil || next != 9 {
		t.Fatalf("position after restore: %d %v, want 9", next, err)
	}
	if err := st.Restore(standby, []Record{{Key: []byte("a1")}}, 10); err != nil { // a tombstone
		t.Fatal(err)
	}
	if v, ok, err := st.Get(replaced); err != nil || ok {
		t.Fatalf("deleted key reads %q (%v %v), want nothing", v, ok, err)
	}
}

// TestPositions lists every task's stored changelog offset, and nothing for
// a task reset or never seen.
func TestPositions(t *testing.T) {
	st, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, b, c := Task{Topic: "in", Partition: 0}, Task{Topic: "orders", Partition: 7}, Task{Topic: "in", Partition: 2}
	txn := st.NewTxn()
	txn.Set(append(a.Prefix(), 'k'), []byte("v"))
	txn.SetChangelogOffset(a, 5)
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := st.Restore(b, []Record{{Key: []byte("k"), Value: []byte("v")}}, 1234567890123); err != nil {
		t.Fatal(err)
	}
	if err := st.Restore(c, nil, 8); err != nil {
		t.Fatal(err)
	}
	if err := st.Reset(c); err != nil {
		t.Fatal(err)
	}
	got, err := st.Positions()
	if err != nil {
		t.Fatal(err)
	}
	want := map[Task]int64{a: 5, b: 1234567890123}
	if !maps.Equal(got, want) {
		t.Fatalf("positions %v, want %v", got, want)
	}
}

// TestKeptKeyChangedIsCaught: a Txn keeps the keys it is given (no copy), so
// a caller that changes a key's buffer after Set would write the changed
// key and leave the staged map unable to find it. In test binaries the
// write refuses with a panic naming the key (checkKeptKeys), so any
// package's test that commits through a Txn catches such a caller; keys
// handed over and left alone commit as ever.
func TestKeptKeyChangedIsCaught(t *testing.T) {
	if !checkKeptKeys {
		t.Fatal("checkKeptKeys is off in a test binary")
	}
	s := open(t)
	task := Task{Topic: "in", Partition: 0}
	good := s.NewTxn()
	for i := range 100 {
		good.Set(fmt.Appendf(task.Prefix(), "k%03d", i), []byte("v"))
	}
	if err := good.Commit(); err != nil {
		t.Fatal(err)
	}

	for _, set := range []struct {
		name string
		set  func(*Txn, []byte)
	}{
		{"Set", func(txn *Txn, k []byte) { txn.Set(k, []byte("v")) }},
		{"SetLocal", func(txn *Txn, k []byte) { txn.SetLocal(k, []byte("v")) }},
		{"SetLogged", func(txn *Txn, k []byte) { txn.SetLogged(k, []byte("v"), []byte("log")) }},
		{"Delete", func(txn *Txn, k []byte) { txn.Delete(k) }},
	} {
		t.Run(set.name, func(t *testing.T) {
			txn := s.NewTxn()
			buf := fmt.Appendf(task.Prefix(), "k%03d", 7)
			set.set(txn, buf)
			for i := range 50 { // others, so the changed key is not alone
				txn.Set(fmt.Appendf(task.Prefix(), "o%03d", i), []byte("v"))
			}
			buf[len(buf)-1] = '8' // the caller reuses its buffer
			msg := func() (msg string) {
				defer func() {
					if r := recover(); r != nil {
						msg = fmt.Sprint(r)
					}
				}()
				_ = txn.Commit()
				return ""
			}()
			if want := `changed after it was handed to the txn (it now reads "t\x00\x02in\x00\x00\x00\x00k008")`; !strings.Contains(msg, want) {
				t.Fatalf("commit after the key changed: panic %q, want one containing %q", msg, want)
			}
		})
	}
}

// TestDeleteRangeLocal: a txn's local range deletion removes exactly the
// keys in [start, end) once committed – not before, and nothing of the
// changelog – and a key the same txn sets inside the range survives it
// (the range goes first in the batch); a restore's range record does the
// same for a standby, below the task prefix. A cached value inside a range
// is not read back.
func TestDeleteRangeLocal(t *testing.T) {
	s := open(t)
	task := Task{Topic: "in", Partition: 4}
	key := func(k string) []byte { return append(task.Prefix(), k...) }
	txn := s.NewTxn()
	for _, k := range []string{"e1-a", "e1-b", "e2-a", "e2-b", "e3-a", "a1"} {
		txn.Set(key(k), []byte("v"))
	}
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Get(key("a1")); !ok { // a read caches it
		t.Fatal("a1 not written")
	}
	txn = s.NewTxn()
	txn.DeleteRangeLocal(key("e1"), key("e2"))
	txn.DeleteRangeLocal(key("a1"), key("a2"))
	txn.SetLocal(key("e1-c"), []byte("new")) // inside the range: survives
	if _, ok, _ := s.Get(key("e1-a")); !ok {
		t.Fatal("a staged range deletion reached the store before its commit")
	}
	n := 0
	txn.Each(func(string, []byte) { n++ })
	if n != 0 {
		t.Fatalf("a txn of local writes has %d changelog records, want none", n)
	}
	if err := txn.Commit(); err != nil {
		t.Fatal(err)
	}
	left := func() string {
		var got []string
		if err := s.Scan(task.Prefix(), func(k, _ []byte) error { got = append(got, string(k[len(task.Prefix()):])); return nil }); err != nil {
			t.Fatal(err)
		}
		return fmtSlice(got)
	}
	if got, want := left(), "[e1-c e2-a e2-b e3-a]"; got != want {
		t.Fatalf("after the range deletions: %s, want %s", got, want)
	}
	if v, ok, _ := s.Get(key("a1")); ok {
		t.Fatalf("a1, deleted by a range, reads %q from the cache", v)
	}
	if _, ok, _ := s.Get(key("e2-a")); !ok { // a read caches it
		t.Fatal("e2-a not written")
	}
	if err := s.Restore(task, []Record{{Key: []byte("e2"), End: []byte("e3")}}, 5); err != nil {
		t.Fatal(err)
	}
	if got, want := left(), "[e1-c e3-a]"; got != want {
		t.Fatalf("after a restore's range record: %s, want %s", got, want)
	}
	if v, ok, _ := s.Get(key("e2-a")); ok {
		t.Fatalf("e2-a, deleted by a restore's range record, reads %q from the cache", v)
	}
}
