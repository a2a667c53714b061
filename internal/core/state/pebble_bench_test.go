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

// BenchmarkMarkKeyspace weighs where the dedup marks' keys fall: random
// (today's layout: the mark's key is its id's hash) against ordered by
// transaction (a time-ordered keyspace: the key starts with the batch's
// number, then the hash), in BenchmarkPebbleSettings's pattern without a WAL.
// PROJECTOR_BENCH_PREFILL events' marks and aggregates (default 0: the
// bench's empty store) are written first and compacted into the bottom
// level before the clock starts: a worker's steady state holds a
// retention's worth of marks, and random keys make every compaction
// rewrite them. Reports CPU time per measured event and the table bytes
// flushed and compacted while measured (docs/performance.md, "Pebble:
// smaller memtables, and the marks' keyspace").
//
//	PROJECTOR_BENCH_PREFILL=5000000 go test -run '^$' -bench MarkKeyspace -benchtime 1x -count 2 ./internal/core/state
func BenchmarkMarkKeyspace(b *testing.B) {
	events := envCount(b, "PROJECTOR_BENCH_EVENTS", 1_000_000, 1)
	prefill := envCount(b, "PROJECTOR_BENCH_PREFILL", 0, 0)
	if testing.Short() {
		events, prefill = 20_000, 10_000
	}
	for _, ordered := range []bool{false, true} {
		name := map[bool]string{false: "random", true: "ordered"}[ordered]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				cpu, written := markWrites(b, ordered, prefill, events)
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
// without a WAL, compacts them, then measures events more: the process's
// CPU time and the table bytes Pebble wrote meanwhile.
func markWrites(b *testing.B, ordered bool, prefill, events int) (time.Duration, uint64) {
	st, err := state.Open(b.TempDir(), state.Options{NoWAL: true})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	task := state.Task{Topic: "case-events"}
	prefix := task.Prefix()
	rng := rand.New(rand.NewPCG(1, 2))
	mark := make([]byte, 40)
	write := func(from, to int) {
		txn := st.NewTxn()
		for n := from; n < to; n++ {
			dk := append(append(make([]byte, 0, 64), prefix...), 'd')
			if ordered {
				dk = binary.BigEndian.AppendUint64(dk, uint64(n/benchTxnSize))
			} else {
				dk = binary.BigEndian.AppendUint64(dk, rng.Uint64())
			}
			for range 3 {
				dk = binary.BigEndian.AppendUint64(dk, rng.Uint64())
			}
			_, ak := benchKeys(prefix, rng.IntN(100_000))
			txn.Set(dk, mark)
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
	write(0, prefill)
	if prefill > 0 {
		// Both layouts start from the same shape: every prefilled key in
		// the bottom level, no compaction owed.
		if err := state.CompactAll(st); err != nil {
			b.Fatal(err)
		}
	}
	w0, start := written(), cpuTime()
	b.StartTimer()
	write(prefill, prefill+events)
	if err := state.Flush(st); err != nil {
		b.Fatal(err)
	}
	return cpuTime() - start, written() - w0
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
