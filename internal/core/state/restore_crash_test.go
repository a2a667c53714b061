package state

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// restoreLog is a simulated changelog partition: the record at offset o
// writes key k<o%keys> = "o", every seventh one deletes it instead, so
// later records overwrite earlier ones and a key's state at a position is
// the last record before it.
type restoreLog struct{ keys int }

func (l restoreLog) record(o int) Record {
	k := fmt.Appendf(nil, "k%05d", o%l.keys)
	if o%7 == 6 {
		return Record{Key: k}
	}
	return Record{Key: k, Value: fmt.Appendf(nil, "%d-%s", o, make([]byte, 40))}
}

// stateAt is every key's value after the records before offset next.
func (l restoreLog) stateAt(next int) map[string]string {
	m := make(map[string]string)
	for o := range next {
		r := l.record(o)
		if r.Value == nil {
			delete(m, string(r.Key))
		} else {
			m[string(r.Key)] = string(r.Value)
		}
	}
	return m
}

// TestRestoreCrashKeepsPositionWithItsData: tasks restoring from several
// goroutines into one store without a WAL, in chunks small and large (above
// half the memtable: Pebble's large batches, queued as their own memtables),
// are crashed at many points
// while they write. After each crash every task's stored position is exactly
// as far as its data: the state of its keys is the changelog's state just
// before that position – never a position durable ahead of the writes it
// covers (the restore would skip them for good), never writes of records
// past it.
func TestRestoreCrashKeepsPositionWithItsData(t *testing.T) {
	const tasks, records, crashes = 4, 12000, 24
	fs := vfs.NewCrashableMem()
	s, err := Open("db", Options{FS: fs, NoWAL: true, MemTableBytes: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	lg := restoreLog{keys: 2000}
	wrote := make(chan struct{}, tasks)
	var wg sync.WaitGroup
	for p := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			task := Task{Topic: "in", Partition: int32(p)}
			rng := rand.New(rand.NewPCG(uint64(p), 1))
			for next := 0; next < records; {
				// Chunks of 50 to 5,000 records: the larger ones are
				// above half of a 256 KiB memtable (Pebble's large
				// batches).
				n := min(records-next, 50+rng.IntN(5000))
				chunk := make([]Record, 0, n)
				for o := next; o < next+n; o++ {
					chunk = append(chunk, lg.record(o))
				}
				next += n
				if err := s.Restore(task, chunk, int64(next)); err != nil {
					t.Error(err)
					return
				}
				wrote <- struct{}{}
			}
		}()
	}
	var clones []*vfs.MemFS
	go func() { wg.Wait(); close(wrote) }()
	i := 0
	for range wrote {
		if i++; i%2 == 0 && len(clones) < crashes {
			clones = append(clones, fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 50, RNG: rand.New(rand.NewPCG(uint64(i), 3))}))
		}
	}
	if t.Failed() {
		return
	}
	s.Abandon()
	positions := map[int64]bool{}
	// The changelog's state at a position, folded once per position: the
	// crashes leave few distinct ones, each checked for every task.
	states := map[int64]map[string]string{}
	for c, crashed := range clones {
		r, err := Open("db", Options{FS: crashed, NoWAL: true})
		if err != nil {
			t.Fatalf("crash %d: %v", c, err)
		}
		for p := range tasks {
			task := Task{Topic: "in", Partition: int32(p)}
			next := position(t, r, task)
			positions[next] = true
			want, ok := states[next]
			if !ok {
				want = lg.stateAt(int(next))
				states[next] = want
			}
			got := map[string]string{}
			if err := r.Scan(task.Prefix(), func(k, v []byte) error {
				got[string(k[len(task.Prefix()):])] = string(v)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("crash %d, task %d at position %d: %d keys stored, the changelog up to there has %d", c, p, next, len(got), len(want))
			}
			for k, v := range want {
				if got[k] != v {
					t.Fatalf("crash %d, task %d at position %d: %s = %.12q, the changelog up to there says %.12q", c, p, next, k, got[k], v)
				}
			}
		}
		r.Close()
	}
	// The crashes fell at different points, not all before the first
	// flush or after the last.
	if len(positions) < 4 {
		t.Fatalf("the crashes left only the positions %v: they did not fall while the restores wrote", positions)
	}
	t.Logf("%d crashes, %d distinct positions", len(clones), len(positions))
}
