package state_test

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/sstable"

	"github.com/projector-dev/projector/internal/core/state"
)

// BenchmarkPebbleSettings weighs Pebble's settings on the processor's write
// pattern in steady state: per event a write-once dedup mark under a random
// key and an aggregate overwrite (of 100k aggregates, uniformly), committed
// every 5000 events – long enough (PROJECTOR_BENCH_EVENTS, default 1M; a
// benchmark iteration is the whole run) for flushes and compactions to take
// their share. It reports the process's CPU time per event (getrusage:
// Pebble's background flushes and compactions included), which a shared
// machine disturbs less than wall time, and the bytes on disk per event.
//
//	PROJECTOR_BENCH_EVENTS=2000000 go test -run '^$' -bench PebbleSettings -benchtime 1x ./internal/core/state
func BenchmarkPebbleSettings(b *testing.B) {
	events := envCount(b, "PROJECTOR_BENCH_EVENTS", 1_000_000, 1)
	if testing.Short() {
		events = 20_000
	}
	for _, v := range []struct {
		name  string
		noWAL bool
		tune  func(*pebble.Options)
	}{
		{"today", false, nil},
		{"nowal", true, nil},
		{"memtable64", false, func(o *pebble.Options) { o.MemTableSize = 64 << 20 }},
		{"memtable1", false, func(o *pebble.Options) { o.MemTableSize = 1 << 20 }},
		{"memtable4", false, func(o *pebble.Options) { o.MemTableSize = 4 << 20 }},
		{"l0threshold8", false, func(o *pebble.Options) { o.L0CompactionThreshold = 8 }},
		{"nocompress-upper", false, func(o *pebble.Options) {
			for i := range 4 {
				o.Levels[i].Compression = func() *sstable.CompressionProfile { return sstable.NoCompression }
			}
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			for b.Loop() {
				cpu, disk := steadyWrites(b, events, v.noWAL, v.tune)
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(events), "cpu-ns/event")
				b.ReportMetric(float64(disk)/float64(events), "disk-B/event")
			}
		})
	}
}

// BenchmarkMarkKeyspace weighs the dedup entries' two key layouts in a
// worker's steady state, in BenchmarkPebbleSettings's pattern without a
// WAL: a retention's worth of marks (PROJECTOR_BENCH_PREFILL, default 2M)
// written and compacted into the bottom level before the clock starts, then
// PROJECTOR_BENCH_EVENTS more (default 1M), each expiring the oldest mark.
// "id" is the earlier layout – the key is the id's hash alone, an expired
// mark a point deletion –, "epoch" today's (decision 020): the key starts
// with the mark's epoch (a retention/8 of time), an expired epoch is one
// range deletion. Random keys make every compaction rewrite the whole
// store's marks, and every deletion is one more key to write and compact.
// Reports CPU time per measured event and the table bytes flushed and
// compacted while measured (docs/performance.md, "Dedup entries keyed by
// epoch").
//
//	go test -run '^$' -bench MarkKeyspace -benchtime 1x -count 2 ./internal/core/state
func BenchmarkMarkKeyspace(b *testing.B) {
	events := envCount(b, "PROJECTOR_BENCH_EVENTS", 1_000_000, 1)
	prefill := envCount(b, "PROJECTOR_BENCH_PREFILL", 2_000_000, 8)
	if testing.Short() {
		events, prefill = 20_000, 16_000
	}
	for _, epochs := range []bool{false, true} {
		b.Run(map[bool]string{false: "id", true: "epoch"}[epochs], func(b *testing.B) {
			for b.Loop() {
				cpu, written := markWrites(b, epochs, prefill, events)
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(events), "cpu-ns/event")
				b.ReportMetric(float64(written)/(1<<20), "table-MiB-written")
			}
		})
	}
}

// envCount is the count in the environment variable name (at least atLeast),
// or def when it is not set.
func envCount(b *testing.B, name string, def, atLeast int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < atLeast {
		b.Fatalf("%s=%q: want a count of at least %d", name, s, atLeast)
	}
	return n
}

// markWrites writes prefill events' marks and aggregates into a fresh store
// without a WAL, compacts them, then measures events more, each expiring
// the mark written prefill events before it: the process's CPU time and the
// table bytes Pebble wrote meanwhile. With epochs, a mark's key starts with
// its epoch (prefill/8 events) and an epoch is deleted by one range
// deletion once its last mark expired.
func markWrites(b *testing.B, epochs bool, prefill, events int) (time.Duration, uint64) {
	st, err := state.Open(b.TempDir(), state.Options{NoWAL: true})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	task := state.Task{Topic: "case-events"}
	prefix := task.Prefix()
	rng := rand.New(rand.NewPCG(1, 2))
	mark := make([]byte, 40)
	epochSize := prefill / 8
	epochKey := func(e int) []byte {
		return binary.BigEndian.AppendUint64(append(append(make([]byte, 0, 64), prefix...), 'e'), uint64(e))
	}
	// key is mark n's key: a hash of n (so that the expiry finds it again).
	key := func(n int) []byte {
		k := append(append(make([]byte, 0, 64), prefix...), 'd')
		if epochs {
			k = epochKey(n / epochSize)
		}
		k = binary.BigEndian.AppendUint64(k, mix(uint64(n)))
		return binary.BigEndian.AppendUint64(k, mix(uint64(n)|1<<62))
	}
	write := func(from, to int, expire bool) {
		txn := st.NewTxn()
		for n := from; n < to; n++ {
			switch {
			case !expire:
			case !epochs:
				txn.DeleteLocal(key(n - prefill))
			case n%epochSize == 0:
				// Epoch n/epochSize begins: the one prefill events older
				// than its start has expired entirely.
				if old := n/epochSize - 8 - 1; old >= 0 {
					txn.DeleteRangeLocal(epochKey(old), epochKey(old+1))
				}
			}
			_, ak := benchKeys(prefix, rng.IntN(100_000))
			txn.SetLocal(key(n), mark)
			txn.Set(ak, benchAgg)
			if (n+1)%benchTxnSize == 0 || n+1 == to {
				txn.SetChangelogOffset(task, int64(n+1))
				if err := txn.Commit(); err != nil {
					b.Fatal(err)
				}
				txn = st.NewTxn()
			}
		}
	}
	written := func() uint64 {
		t := st.Metrics().Total()
		return t.TableBytesFlushed + t.TableBytesCompacted
	}
	b.StopTimer()
	write(0, prefill, false)
	// Both layouts start from the same shape: every prefilled key in the
	// bottom level, no compaction owed.
	if err := state.CompactAll(st); err != nil {
		b.Fatal(err)
	}
	w0, start := written(), cpuTime()
	b.StartTimer()
	write(prefill, prefill+events, true)
	if err := state.Flush(st); err != nil {
		b.Fatal(err)
	}
	return cpuTime() - start, written() - w0
}

// mix is a 64-bit finaliser (splitmix64's): n's hash, uniform over the
// keyspace as an id's SHA-256 prefix is.
func mix(n uint64) uint64 {
	n += 0x9e3779b97f4a7c15
	n = (n ^ n>>30) * 0xbf58476d1ce4e5b9
	n = (n ^ n>>27) * 0x94d049bb133111eb
	return n ^ n>>31
}

// steadyWrites runs the write pattern into a fresh store and returns the
// CPU time it took (Close's flush included) and the store's bytes on disk.
func steadyWrites(b *testing.B, events int, noWAL bool, tune func(*pebble.Options)) (time.Duration, int64) {
	dir := b.TempDir()
	st, err := state.OpenTuned(dir, state.Options{NoWAL: noWAL}, tune)
	if err != nil {
		b.Fatal(err)
	}
	task := state.Task{Topic: "case-events"}
	prefix := task.Prefix()
	rng := rand.New(rand.NewPCG(1, 2))
	mark := make([]byte, 40)
	start := cpuTime()
	txn := st.NewTxn()
	for n := 1; n <= events; n++ {
		dk := append(append(make([]byte, 0, 64), prefix...), 'd')
		dk = binary.BigEndian.AppendUint64(dk, rng.Uint64())
		dk = binary.BigEndian.AppendUint64(dk, rng.Uint64())
		dk = binary.BigEndian.AppendUint64(dk, rng.Uint64())
		dk = binary.BigEndian.AppendUint64(dk, rng.Uint64())
		_, ak := benchKeys(prefix, rng.IntN(100_000))
		txn.Set(dk, mark)
		txn.Set(ak, benchAgg)
		if n%benchTxnSize == 0 || n == events {
			txn.SetChangelogOffset(task, int64(n))
			if err := txn.Commit(); err != nil {
				b.Fatal(err)
			}
			txn = st.NewTxn()
		}
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	return cpuTime() - start, dirBytes(b, dir)
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// dirBytes sums the sizes of the files in dir.
func dirBytes(b *testing.B, dir string) int64 {
	es, err := os.ReadDir(dir)
	if err != nil {
		b.Fatal(err)
	}
	var n int64
	for _, e := range es {
		if fi, err := e.Info(); err == nil && !fi.IsDir() {
			n += fi.Size()
		}
	}
	return n
}
