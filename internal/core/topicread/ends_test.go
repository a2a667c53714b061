package topicread

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestEnds(t *testing.T) {
	e := NewEnds(map[string]map[int32]Range{"a": {0: {Start: 0, End: 3}, 1: {Start: 5, End: 6}}})
	see := func(p int32, off int64) bool { return e.See(&kgo.Record{Topic: "a", Partition: p, Offset: off}) }
	if e.Left() != 2 {
		t.Fatalf("left %d, want 2", e.Left())
	}
	if !see(0, 1) || e.Left() != 2 {
		t.Fatalf("offset 1 of [0,3): want inside, not done (left %d)", e.Left())
	}
	if !see(0, 2) || e.Left() != 1 {
		t.Fatalf("offset 2 of [0,3): want inside and done (left %d)", e.Left())
	}
	if see(0, 3) || see(2, 0) || e.Left() != 1 {
		t.Fatalf("past a reached end or outside the ranges: want outside (left %d)", e.Left())
	}
	// A partition whose record at End-1 never comes (compacted away) is done
	// at the first record past it, which is not passed on.
	if see(1, 7) || e.Left() != 0 {
		t.Fatalf("offset 7 of [5,6): want outside and done (left %d)", e.Left())
	}
}
