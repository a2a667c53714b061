package dedup

import (
	"fmt"
	"testing"
	"time"
)

// hour judges the recent cache's answers with a one-hour retention.
var hour = NewStore(time.Hour)

// held is the number of ids r holds.
func held(r *Recent) int {
	n := 0
	for _, e := range r.slots {
		if e.id != (ID{}) {
			n++
		}
	}
	return n
}

func TestRecent(t *testing.T) {
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	id := func(i byte) ID { return ID{i, 1, 2, 3} }
	fp := func(i byte) [32]byte { return [32]byte{i, 9, 9} }
	r := NewRecent(1)        // one bucket of two
	for i := range byte(3) { // 3 into 2: the first is evicted
		r.Add(id(i), fp(i), now)
	}
	if n := held(r); n != 2 {
		t.Fatalf("len %d, want 2", n)
	}
	if _, known := hour.recentVerdict(r, id(0), fp(0), now); known {
		t.Error("the oldest id survived eviction")
	}
	if v, known := hour.recentVerdict(r, id(1), fp(1), now); !known || v != Duplicate {
		t.Errorf("the older of the two newest: %v %v, want Duplicate", v, known)
	}
	r.Add(id(3), fp(3), now)
	if v, known := hour.recentVerdict(r, id(3), fp(3), now); !known || v != Duplicate {
		t.Errorf("same fingerprint: %v %v, want Duplicate", v, known)
	}
	if v, known := hour.recentVerdict(r, id(3), fp(7), now); !known || v != Conflict {
		t.Errorf("other fingerprint: %v %v, want Conflict", v, known)
	}
	if _, known := hour.recentVerdict(r, id(9), fp(9), now); known {
		t.Error("an id never added is known")
	}
	// Expired marks are left to the store (which says New).
	if _, known := hour.recentVerdict(r, id(3), fp(3), now.Add(time.Hour+time.Millisecond)); known {
		t.Error("an expired mark answered")
	}
	if _, known := hour.recentVerdict(r, id(3), fp(3), now.Add(time.Hour)); !known {
		t.Error("a mark exactly at the retention boundary is live in the store but unknown here")
	}
	var none *Recent
	none.Add(id(1), fp(1), now)
	if _, known := hour.recentVerdict(none, id(1), fp(1), now); known || NewRecent(0) != nil {
		t.Error("a disabled cache answered")
	}
}

// TestRecentHoldsMostRecent: of the n ids added last, at least 80% are
// answered (the table is set-associative, not exact), and of the n/2 last
// at least 90%.
func TestRecentHoldsMostRecent(t *testing.T) {
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	const n = 1 << 14
	r := NewRecent(n)
	id := func(i int) ID { return MakeID("", fmt.Sprint("e", i)) }
	for i := range 3 * n {
		r.Add(id(i), [32]byte{byte(i)}, now)
	}
	found := func(from, to int) float64 {
		k := 0
		for i := from; i < to; i++ {
			if v, known := hour.recentVerdict(r, id(i), [32]byte{byte(i)}, now); known && v == Duplicate {
				k++
			}
		}
		return float64(k) / float64(to-from)
	}
	last, half := found(2*n, 3*n), found(3*n-n/2, 3*n)
	if last < 0.80 || half < 0.90 {
		t.Fatalf("found %.2f of the last n ids and %.2f of the last n/2; want ≥ 0.80 and ≥ 0.90", last, half)
	}
	t.Logf("found %.3f of the last n ids, %.3f of the last n/2", last, half)
}

// TestRecentAddStaged: the marks of staged segments (several, of different
// mark times) enter the cache with their fingerprints and times; marks not
// yet staged do not.
func TestRecentAddStaged(t *testing.T) {
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	d := NewStore(time.Hour)
	kv := &stagingKV{}
	var m Marks
	pt := d.PartitionOver([]byte("p"), nil, nil)
	id := func(i int) ID { return MakeID("", fmt.Sprint("e", i)) }
	fp := func(i int) [32]byte { return [32]byte{byte(i), 7} }
	for i := range 5 {
		pt.Mark(kv, &m, int64(i), id(i), fp(i), now.Add(time.Duration(i/3)*time.Minute))
	}
	pt.Stage(kv, &m)                      // segments of e0–e2 and e3–e4
	pt.Mark(kv, &m, 5, id(5), fp(5), now) // not staged
	r := NewRecent(16)
	r.AddStaged(&m)
	for i := range 5 {
		if v, known := hour.recentVerdict(r, id(i), fp(i), now.Add(time.Minute)); !known || v != Duplicate {
			t.Fatalf("e%d: %v %v, want a known duplicate", i, v, known)
		}
	}
	// e0–e2 were marked a minute before e3–e4: only they expire first.
	if _, known := hour.recentVerdict(r, id(0), fp(0), now.Add(time.Hour+time.Millisecond)); known {
		t.Error("e0 is known past its retention")
	}
	if _, known := hour.recentVerdict(r, id(3), fp(3), now.Add(time.Hour+time.Millisecond)); !known {
		t.Error("e3, marked a minute later, expired with e0")
	}
	if _, known := hour.recentVerdict(r, id(5), fp(5), now); known {
		t.Error("an unstaged mark entered the cache")
	}
}

// stagingKV keeps nothing: the marks' segments are what the test reads.
type stagingKV struct{}

func (stagingKV) Get([]byte) ([]byte, bool, error) { return nil, false, nil }
func (stagingKV) SetLocal(_, _ []byte)             {}
func (stagingKV) SetLogged(_, _, _ []byte)         {}
