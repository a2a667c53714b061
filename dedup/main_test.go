package dedup_test

import (
	"os"
	"testing"
)

// TestMain removes the benchmarks' on-disk fixture (a Pebble store of a
// million entries, some 170 MB) when the benchmarks loaded it.
func TestMain(m *testing.M) {
	code := m.Run()
	if fixture.st != nil {
		fixture.st.Close()
	}
	if fixture.dir != "" {
		os.RemoveAll(fixture.dir)
	}
	os.Exit(code)
}
