package guard

import (
	"encoding/binary"
	"testing"
	"time"
)

// TestParseKeysAndCheckRecord: the changelog key parsers and CheckRecord
// read well-formed records and refuse malformed ones with an error, never a
// panic: a length varint that overflows int (a key no worker writes)
// panicked ParseAggregateKey ("slice bounds out of range"), in the
// processor's restore and in projector inspect and gaps.
func TestParseKeysAndCheckRecord(t *testing.T) {
	agg := AggregateKey(nil, "p", "A-1")
	if p, a, err := ParseAggregateKey(agg); err != nil || p != "p" || a != "A-1" {
		t.Fatalf("ParseAggregateKey(%q) = %q, %q, %v", agg, p, a, err)
	}
	held := heldKey(HeldPrefix(nil, "p", "A-1"), 7)
	if p, a, v, err := ParseHeldKey(held); err != nil || p != "p" || a != "A-1" || v != 7 {
		t.Fatalf("ParseHeldKey(%q) = %q, %q, %d, %v", held, p, a, v, err)
	}
	huge := func(kind byte) []byte { return binary.AppendUvarint([]byte{kind}, 1<<63) }
	for _, k := range [][]byte{huge(KindAggregate), {KindAggregate}, {KindAggregate, 5, 'x'}} {
		if _, _, err := ParseAggregateKey(k); err == nil {
			t.Errorf("ParseAggregateKey(%q): no error", k)
		}
	}
	for _, k := range [][]byte{huge(KindHeld), append(huge(KindHeld)[:1], 1, 'p', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
		held[:len(held)-1], append(held, 0)} {
		if _, _, _, err := ParseHeldKey(k); err == nil {
			t.Errorf("ParseHeldKey(%q): no error", k)
		}
	}
	_, rec := (&aggState{version: 3, doc: []byte(`{}`)}).encode(nil)
	wrapper := encodeHeld(time.UnixMilli(1_700_000_000_000), Source{Offset: 4, Value: []byte(`{}`)})
	for _, c := range []struct {
		key, value []byte
		ok         bool
	}{
		{agg, rec, true}, {held, wrapper, true}, {agg, nil, true}, {[]byte("dxyz"), []byte("?"), true}, {nil, []byte("?"), true},
		{agg, []byte{9}, false}, {agg, []byte{}, false}, {huge(KindAggregate), rec, false},
		{held, []byte{}, false}, {held[:len(held)-1], wrapper, false},
	} {
		if err := CheckRecord(c.key, c.value); (err == nil) != c.ok {
			t.Errorf("CheckRecord(%q, %q) = %v, want ok %v", c.key, c.value, err, c.ok)
		}
	}
}
