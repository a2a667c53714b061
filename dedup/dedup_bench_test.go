package dedup_test

import (
	"encoding/binary"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/internal/core/state"
)

// benchStored is how many ids the benchmark store remembers: enough that the
// entries no longer fit the memtable and lookups reach SSTables.
const benchStored = 1_000_000

var benchNow = time.Date(2026, 6, 28, 10, 15, 30, 0, time.UTC)

type dedupFixture struct {
	dir    string
	st     *state.Store
	d      *dedup.Store
	prefix []byte
	err    error
}

var (
	fixtureOnce sync.Once
	fixture     dedupFixture
)

func benchID(n int) dedup.ID {
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], uint64(n))
	return dedup.MakeID("tenant-1", "CASE-"+string(s[:])+"-ev")
}

func benchFP(n int) (fp [32]byte) {
	binary.BigEndian.PutUint64(fp[:], uint64(n))
	return fp
}

// loadFixture opens (once per process) a Pebble store holding benchStored
// dedup entries, committed in transaction-sized batches like the processor,
// their mark times spread evenly over the retention up to benchNow (a
// worker's steady state: every epoch that may hold live entries has some).
func loadFixture(b *testing.B) *dedupFixture {
	b.Helper()
	fixtureOnce.Do(func() {
		dir, err := os.MkdirTemp("", "dedup-bench-")
		if err != nil {
			fixture.err = err
			return
		}
		fixture.dir = dir
		st, err := state.Open(dir, state.Options{})
		if err != nil {
			fixture.err = err
			return
		}
		const retention = 168 * time.Hour
		fixture.st, fixture.d = st, dedup.NewStore(retention)
		fixture.prefix = state.Task{Topic: "case-events", Partition: 0}.Prefix()
		pt := fixture.d.PartitionOver(fixture.prefix, nil, nil)
		for i := 0; i < benchStored; i += 10_000 {
			txn := st.NewTxn()
			var m dedup.Marks
			at := benchNow.Add(-retention + time.Duration(i)*(retention/benchStored))
			for j := i; j < i+10_000; j++ {
				pt.Mark(txn, &m, int64(j), benchID(2*j), benchFP(2*j), at)
			}
			pt.Stage(txn, &m)
			if fixture.err = txn.Commit(); fixture.err != nil {
				return
			}
		}
	})
	if fixture.err != nil {
		b.Fatal(fixture.err)
	}
	return &fixture
}

// partition is the fixture task's dedup partition as a restore leaves it
// (its filter, when filtered, and its epochs built from the store), without
// a cache of recent ids, so that every duplicate reads the store.
func (f *dedupFixture) partition(b *testing.B, filtered bool) *dedup.Partition {
	var pt *dedup.Partition
	var err error
	if filtered {
		pt, err = f.d.NewPartition(f.st.Scan, f.prefix, 0, benchNow)
	} else {
		pt, err = f.d.PartitionRead(f.st.Scan, f.prefix)
	}
	if err != nil {
		b.Fatal(err)
	}
	return pt
}

// BenchmarkDedupCheck is the per-event dedup lookup on a store with a million
// entries: nine in ten checks are misses (new events, the common case), one
// in ten a duplicate. Transactions of 5000 checks, like the processor's.
func BenchmarkDedupCheck(b *testing.B) { benchCheck(b, false) }

// BenchmarkDedupCheckFiltered is DedupCheck with the task's filter, as the
// processor checks: the misses (nine in ten) are answered by the filter; the
// duplicates still read the store.
func BenchmarkDedupCheckFiltered(b *testing.B) { benchCheck(b, true) }

func benchCheck(b *testing.B, filtered bool) {
	f := loadFixture(b)
	pt := f.partition(b, filtered)
	const probes = 100_000
	ids := make([]dedup.ID, probes)
	fps := make([][32]byte, probes)
	for i := range ids {
		n := 2*benchStored + 2*i + 1 // odd: never stored
		if i%10 == 0 {
			n = 2 * (i * 7 % benchStored) // stored
		}
		ids[i], fps[i] = benchID(n), benchFP(n)
	}
	b.ReportAllocs()
	txn := f.st.NewTxn()
	i, dups := 0, 0
	for b.Loop() {
		if i%5000 == 0 {
			txn = f.st.NewTxn()
		}
		k := i % probes
		v, err := pt.Check(txn, ids[k], fps[k], benchNow)
		if err != nil {
			b.Fatal(err)
		}
		if v == dedup.Duplicate {
			dups++
		}
		i++
	}
	if want := (i + 9) / 10; i >= probes && dups < want*9/10 {
		b.Fatalf("%d duplicates in %d checks, want about %d", dups, i, want)
	}
}

// BenchmarkDedupCheckMarkCommit is the steady state of one new event: check,
// mark, and its share of a 5000-event transaction's synced Pebble commit.
// (Hashing the ids is outside the timer: see BenchmarkMakeID.)
func BenchmarkDedupCheckMarkCommit(b *testing.B) { benchCheckMark(b, false) }

// BenchmarkDedupCheckMarkFiltered is CheckMarkCommit as the processor runs
// it, with the task's filter: a new id is known to be new without a Pebble
// lookup, so this is the dedup code's own cost (and its allocations) plus
// the staging and the amortised commit.
func BenchmarkDedupCheckMarkFiltered(b *testing.B) { benchCheckMark(b, true) }

var markNext int

func benchCheckMark(b *testing.B, filtered bool) {
	f := loadFixture(b)
	pt := f.partition(b, filtered)
	const txnSize = 5000
	ids := make([]dedup.ID, txnSize)
	fps := make([][32]byte, txnSize)
	next := func() {
		for j := range ids {
			markNext++
			n := 4*benchStored + markNext // never stored nor probed before
			ids[j], fps[j] = benchID(n), benchFP(n)
		}
	}
	next()
	b.ReportAllocs()
	txn := f.st.NewTxn()
	kv := &countingKV{KV: txn} // counts the checks that read the store
	var m dedup.Marks
	i := 0
	for b.Loop() {
		v, err := pt.Check(kv, ids[i], fps[i], benchNow)
		if err != nil {
			b.Fatal(err)
		}
		if v != dedup.New {
			b.Fatalf("verdict %v for a new id", v)
		}
		// The id's own input offset (next gave the batch's ids the offsets
		// up to markNext), so that each segment has its own key.
		pt.Mark(txn, &m, int64(markNext-txnSize+i+1), ids[i], fps[i], benchNow)
		if i++; i == txnSize {
			pt.Stage(txn, &m)
			if err := txn.Commit(); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			next()
			b.StartTimer()
			txn, i = f.st.NewTxn(), 0
			kv.KV = txn
		}
	}
	if filtered {
		b.ReportMetric(float64(kv.gets)/float64(b.N), "gets/op")
	}
}

// countingKV counts reads.
type countingKV struct {
	dedup.KV
	gets int
}

func (k *countingKV) Get(key []byte) ([]byte, bool, error) { k.gets++; return k.KV.Get(key) }

// BenchmarkMakeID is the dedup identity hash of (tenantId, eventId).
func BenchmarkMakeID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = dedup.MakeID("tenant-3", "CASE-000123-ev-17")
	}
}

// BenchmarkRecent is the front cache's per-event work at the processor's
// size: one committed mark added, one duplicate of an id marked 100k ids
// earlier checked.
func BenchmarkRecent(b *testing.B) {
	const size, ids, lag = 1 << 18, 1 << 20, 100_000
	r := dedup.NewRecent(size)
	d := dedup.NewStore(time.Hour)
	all := make([]dedup.ID, ids)
	for i := range all {
		all[i] = benchID(i)
	}
	var fp [32]byte
	for i := range lag {
		r.Add(all[i], fp, benchNow)
	}
	b.ReportAllocs()
	i, hits := lag, 0
	for b.Loop() {
		r.Add(all[i%ids], fp, benchNow)
		if _, known := d.RecentVerdict(r, all[(i-lag)%ids], fp, benchNow); known {
			hits++
		}
		i++
	}
	b.ReportMetric(float64(hits)/float64(b.N), "hits/op")
}

// BenchmarkFilter is the task filter's part of a new event as the processor
// runs it (MayContain, then Add) on a filter sized for a million ids and
// holding them: megabytes of bits, so each probe's cost is a cache miss.
func BenchmarkFilter(b *testing.B) {
	const n = 1_000_000
	f := dedup.NewFilter(n)
	for i := range n {
		f.Add(dedup.MakeID("", "held-"+strconv.Itoa(i)))
	}
	ids := make([]dedup.ID, 1<<16)
	for i := range ids {
		ids[i] = dedup.MakeID("", "new-"+strconv.Itoa(i))
	}
	i := 0
	for b.Loop() {
		id := ids[i&(len(ids)-1)]
		if !f.MayContain(id) && i >= len(ids) {
			b.Fatalf("id %d was added but is rejected", i&(len(ids)-1))
		}
		f.Add(id)
		i++
	}
}
