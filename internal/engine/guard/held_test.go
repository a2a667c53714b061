package guard

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"
	"time"
)

// TestHeldWrapperKeepsTrace: a held event's wrapper keeps its W3C trace
// context, so that its outputs carry it when it drains; a wrapper without
// one is byte for byte the format written before traces were carried (an
// older version's state decodes unchanged); a trace section whose lengths
// lie is refused as corrupt, never read past its end.
func TestHeldWrapperKeepsTrace(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_000)
	tp := []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	for _, src := range []Source{
		{Offset: 4, Key: []byte("A-1"), Value: []byte(`{"v":1}`)},
		{Offset: 4, Value: []byte(`{}`)},
		{Offset: 5, Key: []byte("A-1"), Value: []byte(`{"v":2}`), TraceParent: tp, TraceState: []byte("a=1,b=2")},
		{Offset: 6, Key: []byte{}, Value: []byte(`{"v":3}`), TraceParent: tp},
		{Offset: 7, Value: []byte(`{}`), TraceParent: tp, TraceState: []byte("x=y")},
	} {
		w := encodeHeld(at, src)
		gotAt, got, err := DecodeHeld(w)
		if err != nil || !gotAt.Equal(at) || !reflect.DeepEqual(got, src) {
			t.Errorf("DecodeHeld(encodeHeld(%+v)) = %v, %+v, %v", src, gotAt, got, err)
		}
		if src.TraceParent == nil {
			// The format before traces: at, offset, key length (-1: nil), key, value.
			old := binary.AppendVarint(binary.AppendVarint(nil, at.UnixMilli()), src.Offset)
			if src.Key == nil {
				old = binary.AppendVarint(old, -1)
			} else {
				old = append(binary.AppendVarint(old, int64(len(src.Key))), src.Key...)
			}
			if old = append(old, src.Value...); !bytes.Equal(w, old) {
				t.Errorf("an untraced wrapper changed: %x, was %x", w, old)
			}
		}
	}
	head := binary.AppendVarint(binary.AppendVarint(nil, at.UnixMilli()), 4)
	traced := binary.AppendVarint(append([]byte(nil), head...), heldTraced)
	for name, w := range map[string][]byte{
		"parent longer than the wrapper": binary.AppendUvarint(append([]byte(nil), traced...), 1<<62),
		"state longer than the wrapper":  binary.AppendUvarint(append(binary.AppendUvarint(append([]byte(nil), traced...), 1), 'p'), 99),
		"no key length after the trace":  binary.AppendUvarint(binary.AppendUvarint(append([]byte(nil), traced...), 0), 0),
		"traced twice":                   binary.AppendVarint(binary.AppendUvarint(binary.AppendUvarint(append([]byte(nil), traced...), 0), 0), heldTraced),
		"key length below -2":            binary.AppendVarint(append([]byte(nil), head...), -3),
	} {
		if _, _, err := DecodeHeld(w); err == nil {
			t.Errorf("%s: DecodeHeld(%x) decoded", name, w)
		}
	}
}
