package dedup

import (
	"testing"
	"time"
)

func TestRecent(t *testing.T) {
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	id := func(i byte) ID { return ID{i, 1, 2, 3} }
	fp := func(i byte) [32]byte { return [32]byte{i, 9, 9} }
	r := NewRecent(3)
	for i := range byte(4) { // 4 into 3: the first is evicted
		r.Add(id(i), fp(i), now)
	}
	if r.Len() != 3 {
		t.Fatalf("len %d, want 3", r.Len())
	}
	if _, known := r.Check(id(0), fp(0), now, time.Hour); known {
		t.Error("the oldest id survived eviction")
	}
	if v, known := r.Check(id(3), fp(3), now, time.Hour); !known || v != Duplicate {
		t.Errorf("same fingerprint: %v %v, want Duplicate", v, known)
	}
	if v, known := r.Check(id(3), fp(7), now, time.Hour); !known || v != Conflict {
		t.Errorf("other fingerprint: %v %v, want Conflict", v, known)
	}
	if _, known := r.Check(id(9), fp(9), now, time.Hour); known {
		t.Error("an id never added is known")
	}
	// Expired marks are left to the store (which says New, as Store.live).
	if _, known := r.Check(id(3), fp(3), now.Add(time.Hour+time.Millisecond), time.Hour); known {
		t.Error("an expired mark answered")
	}
	if _, known := r.Check(id(3), fp(3), now.Add(time.Hour), time.Hour); !known {
		t.Error("a mark exactly at the retention boundary is live in the store but unknown here")
	}
	var none *Recent
	none.Add(id(1), fp(1), now)
	if _, known := none.Check(id(1), fp(1), now, time.Hour); known || NewRecent(0) != nil {
		t.Error("a disabled cache answered")
	}
}
