package workload

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestInsertInTurn checks the backwards slot assignment against inserting
// one record after another into the stream.
func TestInsertInTurn(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 500 {
		n, m := rng.IntN(20), rng.IntN(12)
		recs := make([]Record, n)
		for i := range recs {
			recs[i] = Record{Key: []byte(fmt.Sprintf("r%d", i))}
		}
		var ins []insertion
		naive := slices.Clone(recs)
		for k := range m {
			at := rng.IntN(n + k + 1)
			r := Record{Key: []byte(fmt.Sprintf("i%d", k)), Kind: KindInvalid}
			ins = append(ins, insertion{at, r})
			naive = slices.Insert(naive, at, r)
		}
		got := insertInTurn(slices.Clone(recs), ins)
		if len(got) != len(naive) {
			t.Fatalf("trial %d: %d records, want %d", trial, len(got), len(naive))
		}
		for i := range got {
			if string(got[i].Key) != string(naive[i].Key) {
				t.Fatalf("trial %d (n=%d, inserts %v): position %d holds %s, want %s", trial, n, ins, i, got[i].Key, naive[i].Key)
			}
		}
	}
}

// TestEscapeMatchesJSON checks the fast path against encoding/json.
func TestEscapeMatchesJSON(t *testing.T) {
	for _, s := range []string{"", "plain", "CASE-000001-ev-3", `q"uote`, `back\slash`, "tab\tnew\nline", "<tag>", "a&b",
		"caf\u00e9", "line\u2028sep", "\x7f", "bad\xffutf8", "\x00"} {
		b, _ := json.Marshal(s)
		if got, want := escape(s), string(b[1:len(b)-1]); got != want {
			t.Errorf("escape(%q) = %q, want %q", s, got, want)
		}
	}
}
