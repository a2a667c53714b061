package dedup_test

import (
	"testing"
	"time"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/harness/race"
)

// mapKV is a KV that keeps what Set gives it (as a *state.Txn keeps
// values) and allocates nothing for keys it already has, so that the
// allocations counted are the store's own.
type mapKV struct {
	index map[string]int
	vals  [][]byte
}

func (m *mapKV) Get(key []byte) ([]byte, bool, error) {
	if i, ok := m.index[string(key)]; ok {
		return m.vals[i], true, nil
	}
	return nil, false, nil
}

func (m *mapKV) SetLocal(key, val []byte)     { m.set(key, val) }
func (m *mapKV) SetLogged(key, val, _ []byte) { m.set(key, val) }

func (m *mapKV) set(key, val []byte) {
	if i, ok := m.index[string(key)]; ok {
		m.vals[i] = val
		return
	}
	m.index[string(key)] = len(m.vals)
	m.vals = append(m.vals, val)
}

// TestCheckMarkAllocs: a check allocates nothing; a mark allocates its
// entry (key and value in one piece), which the KV keeps, plus the
// segment's amortised growth (AllocsPerRun rounds that down).
func TestCheckMarkAllocs(t *testing.T) {
	d := dedup.NewStore(time.Hour)
	now := time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)
	if race.Enabled {
		t.Skip("the race detector makes sync.Pool drop buffers")
	}
	kv := &mapKV{index: map[string]int{}}
	id, fp := dedup.MakeID("t", "e1"), [32]byte{7}
	var m dedup.Marks
	bare, filtered := d.PartitionOver(prefix, nil, nil), d.PartitionOver(prefix, dedup.NewFilter(10), nil)
	bare.Mark(kv, &m, 0, id, fp, now)
	for _, c := range []struct {
		name string
		want float64
		fn   func()
	}{
		{"check hit", 0, func() { bare.Check(kv, id, fp, now) }},
		{"check miss", 0, func() { bare.Check(kv, dedup.MakeID("t", "e2"), fp, now) }},
		{"check filtered", 0, func() { filtered.Check(kv, dedup.MakeID("t", "e2"), fp, now) }},
		// The same key again: the KV has the key, so only the entry allocates.
		{"mark", 1, func() { filtered.Mark(kv, &m, 1, id, fp, now) }},
	} {
		if got := testing.AllocsPerRun(100, c.fn); got > c.want {
			t.Errorf("%s: %v allocations, want %v", c.name, got, c.want)
		}
	}
	// The marked entry reads back after a mark over the same buffer reuse.
	if v, err := bare.Check(kv, id, fp, now); err != nil || v != dedup.Duplicate {
		t.Fatalf("verdict %v (%v), want duplicate", v, err)
	}
	if v, err := bare.Check(kv, id, [32]byte{8}, now); err != nil || v != dedup.Conflict {
		t.Fatalf("verdict %v (%v), want conflict", v, err)
	}
}
