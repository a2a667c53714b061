package bench

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/projector-dev/projector/internal/harness/testsize"
)

// TestHostileStreams runs Hostile at a small size: every record of each
// stream gets its outcome (the counts are exact), and it logs each stream's
// rate against the valid one. The rates are a measurement, reported in
// docs/reliability.md from runs of 100k records
// (PROJECTOR_HOSTILE_RECORDS=100000); at CI's size and on a shared machine
// they are too noisy to assert.
func TestHostileStreams(t *testing.T) {
	n := 20000
	if testsize.Small() {
		n = 4000
	}
	if v := os.Getenv("PROJECTOR_HOSTILE_RECORDS"); v != "" {
		n, _ = strconv.Atoi(v)
	}
	var kinds []string
	if v := os.Getenv("PROJECTOR_HOSTILE_KINDS"); v != "" {
		kinds = strings.Split(v, ",")
	}
	rates, err := Hostile(context.Background(), HostileOptions{Records: n, Dir: t.TempDir(), Kinds: kinds})
	if err != nil {
		t.Fatal(err)
	}
	originals := int64(max(n/100, 1))
	want := map[string]map[string]int64{
		"valid":     {"applied": int64(n)},
		"invalid":   {"invalid": int64(n)},
		"duplicate": {"applied": originals, "duplicate": int64(n) - originals},
		"conflict":  {"applied": originals, "conflict": int64(n) - originals},
		"held":      {"held": int64(n)},
	}
	valid := rates[0].Rate()
	for _, r := range rates {
		for oc, w := range want[r.Kind] {
			if got := r.Outcomes[oc]; got != w {
				t.Errorf("%s stream: %d %s, want %d (outcomes %v)", r.Kind, got, oc, w, r.Outcomes)
			}
		}
		t.Logf("%-9s %6d records in %6.2fs: %8.0f records/s, %.2f × the valid rate", r.Kind, r.Records, r.Phase.Elapsed.Seconds(), r.Rate(), r.Rate()/valid)
	}
}
