package state_test

import (
	"encoding/binary"
	"testing"

	"github.com/projector-dev/projector/internal/core/state"
)

const benchTxnSize = 5000

// benchKeys returns an event's two staged keys, like the processor's: a dedup
// entry and the aggregate record, below the task prefix.
func benchKeys(prefix []byte, n int) (dedupKey, aggKey []byte) {
	// dedup.Kind, then the 16-byte id, a hash (dedup.MakeID).
	dedupKey = append(append([]byte(nil), prefix...), 'd')
	dedupKey = binary.BigEndian.AppendUint64(dedupKey, uint64(n+1)*0x9e3779b97f4a7c15)
	dedupKey = binary.BigEndian.AppendUint64(dedupKey, uint64(n+1)*0xbf58476d1ce4e5b9)
	aggKey = append(append([]byte(nil), prefix...), 'a', 13)
	aggKey = append(aggKey, "case-overview"...)
	aggKey = binary.BigEndian.AppendUint64(aggKey, uint64(n%10_000))
	return dedupKey, aggKey
}

var (
	benchFP  = make([]byte, 32)
	benchAgg = append([]byte{1, 7, 0, 0, 0}, `{"owner":"user-12","priority":3,"status":"OPEN","title":"Case CASE-000123","updates":7}`...)
)

// BenchmarkTxnStageAndCommit is the state side of one event: stage its two
// writes, and its share of the transaction's synced Pebble commit, every
// 5000 events. (The changelog records are eos's: BenchmarkChangelogEncode.)
func BenchmarkTxnStageAndCommit(b *testing.B) {
	st, err := state.Open(b.TempDir(), state.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	prefix := state.Task{Topic: "case-events", Partition: 0}.Prefix()
	b.ReportAllocs()
	txn := st.NewTxn()
	n := 0
	for b.Loop() {
		dk, ak := benchKeys(prefix, n)
		txn.Set(dk, benchFP)
		txn.Set(ak, benchAgg)
		if n++; n%benchTxnSize == 0 {
			txn.SetChangelogOffset(state.Task{Topic: "case-events"}, int64(n))
			if err := txn.Commit(); err != nil {
				b.Fatal(err)
			}
			txn = st.NewTxn()
		}
	}
}
