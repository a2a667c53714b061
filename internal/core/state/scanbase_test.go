package state

import (
	"fmt"
	"testing"
)

// TestScanThroughBase: a txn over a base sees, in one scan, the committed
// keys, the base's staged keys and its own – also while the base is being
// written to Pebble on another goroutine (the loop's overlapped commit):
// WriteAll must not change the base under a reader (a base emptied
// mid-scan once lost keys that the scan's Pebble snapshot did not have yet,
// and with them duplicates).
func TestScanThroughBase(t *testing.T) {
	st := open(t)
	task := Task{Topic: "in", Partition: 0}
	pre := append(task.Prefix(), 'd')
	key := func(i int) []byte { return fmt.Appendf(append([]byte(nil), pre...), "%06d", i) }
	c := st.NewTxn()
	for i := 0; i < 3000; i += 3 {
		c.Set(key(i), []byte("c"))
	}
	if err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	for round := range 20 {
		base := st.NewTxn()
		for i := 1; i < 3000; i += 3 {
			base.Set(key(i+3000*round), []byte("b"))
		}
		top := st.NewTxnOver(base, 0)
		for i := 2; i < 3000; i += 3 {
			top.Set(key(i+3000*round), []byte("t"))
		}
		done := make(chan error, 1)
		go func() { done <- st.WriteAll([]*Txn{base}) }()
		for {
			n := 0
			if err := top.Scan(pre, func(k, v []byte) error { n++; return nil }); err != nil {
				t.Fatal(err)
			}
			if want := 1000 + 1000*(round+1) + 1000; n != want {
				t.Fatalf("round %d: scan saw %d keys, want %d", round, n, want)
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
				base.Finish()
				goto next
			default:
			}
		}
	next:
	}
}
