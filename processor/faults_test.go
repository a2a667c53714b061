package processor_test

// The fault matrix (docs/design.md#faults-and-reliability, docs/reliability.md)
// as named, seeded tests. Each asserts its invariant and logs a figure line
//
//	N events, D dupes injected, K crashes, A aborts, F faults; output dup 0, lost 0, aborted-visible 0, nonmonotonic 0, projection diff 0, seed S
//
// where A counts abort markers on the outputs and the changelog (one per
// partition an aborted transaction touched) and every checker column comes
// from internal/harness/soak.Check: the projection against the workload's reference
// model, the dead letters against the expected reasons, and every output
// topic read read_uncommitted and read_committed to prove that no record of
// an aborted or open transaction is visible. The single-crash, single-abort
// and two-instance cases live in recovery_test.go; these extend them.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/app/broker"
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/projection"
)

// TestFaultCrashLoop: many crashes at seeded random points of the
// transaction – after Kafka committed and before Pebble was written, and
// after staging before the commit – each followed by a restart on the same
// state dir. docs/design.md#behind-kafka and #changelog-closes-gap: state
// restored from the changelog, aborted events processed again, projection ==
// model.
func TestFaultCrashLoop(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		seed        uint64
		afterCommit bool
		afterStage  bool
	}{
		{"after-commit-before-pebble", 101, true, false},
		{"after-staging-before-commit", 102, false, true},
		{"mixed", 103, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const crashes = 5
			e := newEnv(t, 4)
			recs, exp := genWorkload(tc.seed, lean(20_000), lean(2_000), nil)
			e.produce(recs)
			rng := rand.New(rand.NewPCG(tc.seed, 1))
			crashed := 0
			restored := int64(0)
			var last *instance
			errs := e.supervise(4*time.Minute, nil, func(life int) *instance {
				if last != nil {
					restored += last.p.Stats().Restored()
				}
				// 150 records per transaction (75 at the small size): the
				// input, 22,800 records (2,280), is 152 full
				// transactions (30.4), and the seeds' crash points need
				// up to 23 commits ("mixed"). At 200 (100: 22.8 full
				// transactions at the small size) the last crash needed
				// partly filled transactions, which a busy machine,
				// whose polls return more at once, may not give.
				o := instOpts{maxRecs: lean(150)}
				if life < crashes {
					n := 1 + rng.IntN(6)
					switch {
					case tc.afterCommit && (!tc.afterStage || rng.IntN(2) == 0):
						o.hooks = ptr(hooksAfterCommit(n))
					default:
						o.hooks = ptr(hooksAfterStage(n))
					}
				}
				last = e.start(o)
				return last
			})
			for _, err := range errs {
				if !isCrash(err) {
					t.Fatalf("unexpected error: %v", err)
				}
				crashed++
			}
			if crashed != crashes {
				t.Fatalf("%d crashes, want %d", crashed, crashes)
			}
			if tc.afterCommit && !tc.afterStage && restored == 0 {
				t.Error("no restart restored the committed-but-unwritten state from the changelog")
			}
			e.checkFigure(exp, len(recs), crashed, crashed, tc.seed)
		})
	}
}

// TestFaultEndOutcomeUnknown: the response to EndTxn never reaches the
// client. In "applied" the broker commits and the answer is lost (the
// request is held past the client's request timeout, then handled); in
// "dropped" the connection dies before the broker sees it. Either way the
// transaction is all or nothing, no aborted record is visible, and Pebble
// is never ahead of Kafka.
func TestFaultEndOutcomeUnknown(t *testing.T) {
	t.Parallel() // mostly waits: three EndTxns held past the client's timeout

	const overhead = 3 * time.Second // the client's request timeout (RequestTimeoutOverhead)
	for _, tc := range []struct {
		name  string
		seed  uint64
		apply bool
	}{{"applied-response-lost", 201, true}, {"dropped-before-broker", 202, false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 4)
			recs, exp := genWorkload(tc.seed, lean(20_000), lean(2_000), nil)
			e.produce(recs)
			var seen, injected atomic.Int64
			c := e.b.Cluster
			c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				r := req.(*kmsg.EndTxnRequest)
				if !r.Commit || injected.Load() >= 3 || seen.Add(1)%4 != 0 {
					return nil, nil, false
				}
				injected.Add(1)
				if tc.apply {
					// Hold it past the client's request timeout
					// (overhead, below), then let the broker commit it.
					// sleep ok: the fault itself (kfake holds the request past the client's timeout); the test then waits for the outcome.
					c.SleepControl(func() { time.Sleep(overhead + time.Second) })
					return nil, nil, false
				}
				return nil, errors.New("drop the connection"), true
			})
			// The client gives up on a request after overhead rather than
			// kgo's default 10s, so that each of the three held EndTxns
			// costs seconds, not a quarter of a minute: the fault (an
			// answer that comes after the client stopped waiting) is the
			// same.
			var lost endTxnLost
			o := instOpts{maxRecs: lean(300), clientOpts: []kgo.Opt{kgo.RequestTimeoutOverhead(overhead), kgo.WithHooks(&lost)}}
			errs := e.supervise(5*time.Minute, nil, func(int) *instance { return e.start(o) })
			if injected.Load() == 0 {
				t.Fatal("no EndTxn was interfered with")
			}
			// The fault landed: the client never read the answer to an
			// EndTxn it had sent.
			if lost.n.Load() == 0 {
				t.Fatal("every EndTxn was answered: the client never lost an outcome")
			}
			t.Logf("EndTxn answers the client did not read: %d", lost.n.Load())
			for _, err := range errs {
				t.Logf("a life ended with: %v", err)
			}
			e.checkFigure(exp, len(recs), len(errs), int(injected.Load()), tc.seed)
		})
	}
}

// endTxnLost counts the EndTxn requests whose response the client did not
// read (timed out, or the connection died): a kgo.HookBrokerE2E.
type endTxnLost struct{ n atomic.Int64 }

func (h *endTxnLost) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if key == int16(kmsg.EndTxn) && e2e.Err() != nil {
		h.n.Add(1)
	}
}

// TestFaultDuplicateDelivery: every event is re-delivered about once at a
// later offset (half of the copies re-serialised). Output count == unique
// events: exactly one projection record per applied event, none per copy.
func TestFaultDuplicateDelivery(t *testing.T) {
	t.Parallel()
	const seed = 301
	e := newEnv(t, 4)
	recs, exp := genWorkload(seed, lean(20_000), lean(2_000), func(o *workload.Options) { o.Duplicates = 1.0 })
	e.produce(recs)
	in := e.start(instOpts{maxRecs: 500})
	e.waitCaughtUp(3 * time.Minute)
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := in.p.Stats().Outcome(processor.OutcomeDuplicate); got != int64(exp.Duplicates) {
		t.Errorf("duplicates: got %d, want %d", got, exp.Duplicates)
	}
	out := e.read(projTopic)
	if len(out) != exp.Applied {
		t.Errorf("projection records: %d, want one per unique applied event: %d", len(out), exp.Applied)
	}
	e.checkFigure(exp, len(recs), 0, exp.Duplicates, seed)
}

// TestFaultZombieFenced: a second instance with the same instance id (same
// transactional id) starts while the first is inside a transaction with its
// outputs produced. The first is fenced: its Run returns ErrFenced (the
// binary exits 1), its open transaction is aborted and none of its output
// is visible read_committed; the second finishes the work.
func TestFaultZombieFenced(t *testing.T) {
	t.Parallel()
	const seed = 401
	e := newEnv(t, 4)
	recs, exp := genWorkload(seed, lean(20_000), lean(2_000), nil)
	e.produce(recs)
	inTxn := make(chan struct{})
	release := make(chan struct{})
	var calls atomic.Int64
	zombie := e.start(instOpts{id: "same", stateDir: e.dir + "/zombie", maxRecs: lean(300), hooks: &eos.Hooks{
		AfterStage: func() error {
			if calls.Add(1) == 3 {
				close(inTxn)
				<-release // stuck mid-transaction (a GC pause, a frozen VM)
			}
			return nil
		},
	}})
	select {
	case <-inTxn:
	case <-time.After(2 * time.Minute):
		t.Fatal("zombie never reached its third transaction")
	}
	successor := e.start(instOpts{id: "same", stateDir: e.dir + "/successor", maxRecs: lean(300)})
	waitProgress(t, successor, 3)
	close(release)
	err := zombie.wait(t, time.Minute)
	if !errors.Is(err, processor.ErrFenced) {
		t.Fatalf("zombie: want an error wrapping processor.ErrFenced, got %v", err)
	}
	e.waitCaughtUp(3 * time.Minute)
	if err := successor.stop(t); err != nil {
		t.Fatal(err)
	}
	f := e.checkFigure(exp, len(recs), 0, 1, seed)
	if f.Aborts == 0 {
		t.Error("the zombie's open transaction left no abort marker")
	}
}

// TestFaultRebalanceMidTransaction: instances join and leave on a seeded
// schedule while transactions are slowed down (a random pause after
// staging), so that revokes land inside open transactions. 0 dup, 0 lost;
// state follows the partitions through the changelog.
func TestFaultRebalanceMidTransaction(t *testing.T) {
	t.Parallel() // mostly waits: membership changes paced 0.5-2s apart, slowed transactions
	const seed = 501
	e := newEnv(t, 4)
	recs, exp := genWorkload(seed, 30_000, 3_000, nil)
	rng := rand.New(rand.NewPCG(seed, 2))
	var mu sync.Mutex
	slow := func() *eos.Hooks {
		return &eos.Hooks{AfterStage: func() error {
			mu.Lock()
			d := time.Duration(rng.IntN(150)) * time.Millisecond
			mu.Unlock()
			time.Sleep(d) // sleep ok: the fault itself, a slow transaction (random 0-150 ms)
			return nil
		}}
	}
	start := func(id string) *instance { return e.start(instOpts{id: id, maxRecs: 200, hooks: slow()}) }
	third := len(recs) / 4
	e.produce(recs[:third])
	live := map[string]*instance{"a": start("a")}
	waitProgress(t, live["a"], 2)
	changes := 0
	for step, id := range []string{"b", "c", "a", "d", "b", "a"} {
		if in, ok := live[id]; ok { // leave
			if err := in.stop(t); err != nil {
				t.Fatalf("%s: %v", id, err)
			}
			delete(live, id)
		} else { // join
			live[id] = start(id)
		}
		changes++
		if step < 3 {
			e.produce(recs[third*(step+1) : min(third*(step+2), len(recs))])
		}
		mu.Lock() // the hooks draw from rng on the workers' goroutines
		pause := time.Duration(500+rng.IntN(1500)) * time.Millisecond
		mu.Unlock()
		time.Sleep(pause) // sleep ok: paces the membership changes; the test then waits for caught-up offsets
	}
	e.waitCaughtUp(4 * time.Minute)
	aborts := int64(0)
	for id, in := range live {
		aborts += in.p.Stats().Transactions("aborted")
		if err := in.stop(t); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	e.checkFigure(exp, len(recs), 0, changes, seed)
}

// TestFaultPoisonRecords: 5% malformed records and 2% conflicting event-id
// reuse anywhere in the stream: each is dead-lettered with its reason in
// the transaction that consumed it, and the partitions keep flowing.
func TestFaultPoisonRecords(t *testing.T) {
	t.Parallel()
	const seed = 601
	e := newEnv(t, 4)
	recs, exp := genWorkload(seed, lean(20_000), lean(2_000), func(o *workload.Options) { o.Invalid, o.Conflicts = 0.05, 0.02 })
	e.produce(recs)
	in := e.start(instOpts{maxRecs: 300})
	e.waitCaughtUp(3 * time.Minute)
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := len(e.read(dlqTopic)); got != exp.Invalid+exp.Conflicts {
		t.Errorf("dead letters: %d, want %d", got, exp.Invalid+exp.Conflicts)
	}
	e.checkFigure(exp, len(recs), 0, exp.Invalid+exp.Conflicts, seed)
}

// TestFaultPebbleWriteError: Pebble's filesystem starts failing (an I/O
// error, or ENOSPC: disk full) while the processor runs. The transaction in
// flight aborts or the process stops; it never goes on with state it could
// not write. A restart on a healthy disk restores from the changelog and
// nothing is lost.
func TestFaultPebbleWriteError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		seed  uint64
		err   error
		ops   func(errorfs.Op) bool
		noWAL bool // the processor's store as it runs (no WAL: the flush fails)
	}{
		{"io-error-on-wal-sync", 701, errorfs.ErrInjected, func(op errorfs.Op) bool {
			return op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData
		}, false},
		{"disk-full", 702, syscall.ENOSPC, func(op errorfs.Op) bool {
			return op.Kind.ReadOrWrite() == errorfs.OpIsWrite
		}, false},
		// The tables' writes only: a flush whose table was written before
		// the disk filled fails in its MANIFEST update, which Pebble takes
		// as fatal (a panic in its flush goroutine, no error to contain): a
		// process crash, which the crash tests cover, and the end of this
		// test binary.
		{"disk-full-nowal", 703, syscall.ENOSPC, func(op errorfs.Op) bool {
			return op.Kind.ReadOrWrite() == errorfs.OpIsWrite && strings.HasSuffix(op.Path, ".sst")
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 4)
			recs, exp := genWorkload(tc.seed, lean(20_000), lean(2_000), nil)
			// The second half is produced only once the disk has failed, so
			// that records still flow into the failing store however fast
			// the first half went (without the race detector, at a tenth of
			// the size, the whole input was consumed before a poll saw the
			// fifth commit); supervise stops only after it (rest).
			half := len(recs) / 2
			e.produce(recs[:half])
			var rest atomic.Bool
			var on atomic.Bool
			var hits atomic.Int64
			fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
				if on.Load() && tc.ops(op) {
					hits.Add(1)
					return tc.err
				}
				return nil
			}))
			var first *instance
			errs := e.supervise(4*time.Minute, rest.Load, func(life int) *instance {
				if life > 0 {
					on.Store(false) // the operator freed the disk
					return e.start(instOpts{maxRecs: lean(300)})
				}
				so, grow := state.Options{FS: fs, CachedValues: -1, MemTableBytes: memtableBytes}, growMemtable
				if tc.noWAL {
					// No WAL to fail in a rotation; a flush at every commit
					// meets the full disk at the first commit after it fills,
					// however fast the workload goes (at a tenth of its size
					// without the race detector it is consumed in a tenth of a
					// second: a flush every 200 ms met the disk only at Close).
					so, grow = state.Options{FS: fs, CachedValues: -1, NoWAL: true, FlushEvery: time.Nanosecond}, nil
				}
				in, err := e.startWith(instOpts{maxRecs: lean(300)}, so, func(_ *processor.Config, st *state.Store) {
					if grow != nil {
						grow(t, st)
					}
				})
				if err != nil {
					t.Fatal(err)
				}
				first = in
				go func() {
					// Not Await: this goroutine must not fail the test;
					// supervise reports a worker that makes no progress.
					_ = testkit.WaitFor(context.Background(), 4*time.Minute, func() bool { return first.p.Stats().Transactions("committed") >= 3 })
					on.Store(true)
					if err := testkit.Produce(context.Background(), e.brokers, inputTopic, recs[half:]); err != nil {
						return // rest stays false: supervise reports no progress
					}
					rest.Store(true)
				}()
				return in
			})
			if hits.Load() == 0 {
				t.Fatal("no filesystem error was injected")
			}
			if len(errs) == 0 {
				t.Fatal("the processor went on although Pebble failed")
			}
			t.Logf("stopped with: %v", errs[0])
			e.checkFigure(exp, len(recs), len(errs), int(hits.Load()), tc.seed)
		})
	}
}

// memtableBytes is the memtable size of TestFaultPebbleWriteError's failing
// store: room for the few transactions it commits before the disk fails
// (a few MiB), small enough that filling it costs little.
const memtableBytes = 16 << 20

// growMemtable writes ~18 MiB of throwaway keys (outside every task prefix)
// so that Pebble's memtable, which starts at 256 KiB and doubles at each
// rotation (256 KiB + … + 8 MiB ≈ 16 MiB written), has grown to its full
// memtableBytes and the test's own writes need no memtable rotation. A WAL
// failure during a rotation is a Pebble panic with its mutex released: a
// fatal runtime error that ends the process. In production that is a crash
// like any other (the restart restores from the changelog); here it would
// end the test binary. The bytes are what grow the memtable: they go as
// 32 KiB values in ~1 MiB batches, 576 keys, since the per-key work (the
// memtable's inserts, the flushes and compactions of the filled memtables,
// the restart's key scan) was most of the test's CPU under -race with 1 KiB
// values (18,432 keys).
//
// It then waits until the filled memtables are flushed and their tables
// compacted: a flush or compaction that is still writing when the disk
// fails would fail in Pebble's background (a fatal error that ends the
// process), not in the processor's writes the test is about.
func growMemtable(t *testing.T, st *state.Store) {
	val := make([]byte, 32<<10)
	for i := range memtableBytes>>20 + 2 {
		txn := st.NewTxn()
		for j := range 1 << 5 {
			txn.Set(fmt.Appendf(nil, "zfill-%03d-%04d", i, j), val)
		}
		if err := txn.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Await(t, time.Minute, "the filled memtables flushed and compacted", func() bool {
		m := st.Metrics()
		return m.MemTable.Count == 1 && m.Flush.NumInProgress == 0 && m.Compact.NumInProgress == 0
	})
}

// TestFaultOutOfOrderVersions: 30% of the events are swapped with their
// next version: held, then drained in order the moment the gap closes.
func TestFaultOutOfOrderVersions(t *testing.T) {
	t.Parallel()
	const seed = 801
	e := newEnv(t, 4)
	recs, exp := genWorkload(seed, lean(20_000), lean(2_000), func(o *workload.Options) { o.Reorder = 0.3 })
	e.produce(recs)
	in := e.start(instOpts{maxRecs: 300})
	e.waitCaughtUp(3 * time.Minute)
	// Every gap closed: the gap index (what the gap metrics report) must
	// say so, including gaps opened in one transaction and closed in the
	// next while the first one's Pebble write was still in flight.
	testkit.Await(t, 10*time.Second, "no open gaps once every gap was filled", func() bool { return in.p.Stats().Gaps()["case-overview"].Open == 0 })
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	if got := in.p.Stats().Outcome(processor.OutcomeHeld); got != int64(exp.Held) || got == 0 {
		t.Errorf("held: got %d, want %d (> 0)", got, exp.Held)
	}
	e.checkFigure(exp, len(recs), 0, exp.Held, seed)
}

// TestFaultGapFilledLate: 3% of the events arrive ~2000 records late, across
// transactions and a restart on an empty state dir (held events are state,
// restored from the changelog).
func TestFaultGapFilledLate(t *testing.T) {
	t.Parallel()
	const seed = 802
	e := newEnv(t, 4)
	recs, exp := genWorkload(seed, 20_000, 2_000, func(o *workload.Options) { o.LateGaps = 0.03 })
	e.produce(recs[:len(recs)/2])
	in := e.start(instOpts{maxRecs: 300})
	waitProgress(t, in, 5)
	if err := in.stop(t); err != nil {
		t.Fatal(err)
	}
	e.produce(recs[len(recs)/2:])
	in2 := e.start(instOpts{maxRecs: 300, stateDir: e.dir + "/fresh"})
	e.waitCaughtUp(3 * time.Minute)
	if err := in2.stop(t); err != nil {
		t.Fatal(err)
	}
	e.checkFigure(exp, len(recs), 1, exp.Held, seed)
}

// TestFaultGapNeverFilled: versions 1, 2, 4, 5 of an aggregate, 3 never
// comes (until the end, for wait). After the hold timeout: wait keeps
// holding (and drains when 3 finally arrives), skip applies 4 and 5,
// deadletter sends them to the dead-letter topic with gap-timeout.
func TestFaultGapNeverFilled(t *testing.T) {
	t.Parallel()
	v1, v2 := gapEvent(1, "CaseOpened", `{"status":"OPEN"}`), gapEvent(2, "CaseUpdated", `{"a":2}`)
	v3, v4, v5 := gapEvent(3, "CaseUpdated", `{"x":3}`), gapEvent(4, "CaseUpdated", `{"b":4}`), gapEvent(5, "CaseEscalated", `{"status":"ESCALATED"}`)
	for _, tc := range []struct {
		name    string
		policy  projection.Policy
		final   workload.Final
		dead    map[string]string
		late    bool // v3 arrives after the timeout
		lateFin workload.Final
	}{
		{name: "wait", policy: projection.Wait,
			final: workload.Final{Version: 2, State: map[string]any{"status": "OPEN", "a": 2.0}},
			late:  true, lateFin: workload.Final{Version: 5, State: map[string]any{"status": "ESCALATED", "a": 2.0, "x": 3.0, "b": 4.0}}},
		{name: "skip", policy: projection.Skip,
			final: workload.Final{Version: 5, State: map[string]any{"status": "ESCALATED", "a": 2.0, "b": 4.0}}},
		{name: "deadletter", policy: projection.DeadLetter,
			final: workload.Final{Version: 2, State: map[string]any{"status": "OPEN", "a": 2.0}},
			dead:  map[string]string{string(v4.Value): "gap-timeout", string(v5.Value): "gap-timeout"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 4)
			var clock skewedClock
			e.produce([]workload.Record{v1, v2, v4, v5})
			in := e.start(instOpts{maxRecs: 300, policy: tc.policy, hold: time.Minute, now: clock.now})
			e.waitCaughtUp(time.Minute)
			// The group's offsets move at the Kafka commit; the counters
			// only once that transaction's Pebble write landed (AsyncCommit).
			if err := testkit.WaitFor(context.Background(), time.Minute, func() bool { return in.p.Stats().Outcome(processor.OutcomeHeld) == 2 }); err != nil {
				t.Fatalf("held: %d, want 2 (%v)", in.p.Stats().Outcome(processor.OutcomeHeld), err)
			}
			clock.set(2 * time.Minute) // the hold timeout passes
			want := tc.final
			var rep testkit.Report
			testkit.Await(t, time.Minute, "the hold timeout's outcome", func() bool {
				rep = testkit.CheckProjection(e.read(projTopic), map[string]workload.Final{"GAP-1": want})
				return rep.OK() && len(e.read(dlqTopic)) == len(tc.dead)
			})
			if tc.late {
				e.produce([]workload.Record{v3})
				e.waitCaughtUp(time.Minute)
				want = tc.lateFin
			}
			if err := in.stop(t); err != nil {
				t.Fatal(err)
			}
			exp := workload.Expect{Final: map[string]workload.Final{"GAP-1": want}, DeadLetterValues: tc.dead}
			if exp.DeadLetterValues == nil {
				exp.DeadLetterValues = map[string]string{}
			}
			e.checkFigure(exp, 4+btoi(tc.late), 0, 1, 0)
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestFaultBrokerRestartUnderLoad: the (persistent) broker is stopped and
// started again on the same directory and port twice while the processor
// works and input is still arriving. Instances that stop on the outage are
// restarted; the result equals the model.
func TestFaultBrokerRestartUnderLoad(t *testing.T) {
	t.Parallel() // mostly waits: broker restarts paced seconds apart
	const seed = 901
	dir := t.TempDir()
	b, err := broker.Start(broker.Options{Dir: dir + "/broker", Listen: "127.0.0.1:0", Partitions: 4})
	if err != nil {
		t.Fatal(err)
	}
	addr := b.Addr()
	var bmu sync.Mutex
	t.Cleanup(func() { bmu.Lock(); b.Close(); bmu.Unlock() })
	e := &env{t: t, brokers: []string{addr}, b: b, dir: t.TempDir()}
	if err := testkit.CreateTopic(context.Background(), e.brokers, inputTopic, 4); err != nil {
		t.Fatal(err)
	}
	recs, exp := genWorkload(seed, 20_000, 2_000, nil)
	e.produce(recs[:len(recs)/3])
	restarts := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(1500 * time.Millisecond) // sleep ok: paces the broker restarts; the test waits for caught-up offsets
		for i := 0; i < 2; i++ {
			bmu.Lock()
			b.Close()
			var err error
			for range 50 {
				if b, err = broker.Start(broker.Options{Dir: dir + "/broker", Listen: addr, Partitions: 4}); err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond) // sleep ok: retry pause while the old listener's port is released
			}
			bmu.Unlock()
			if err != nil {
				t.Errorf("broker restart: %v", err)
				return
			}
			restarts++
			if err := testkit.Produce(context.Background(), e.brokers, inputTopic, recs[len(recs)/3*(i+1):min(len(recs)/3*(i+2), len(recs))]); err != nil {
				t.Errorf("produce: %v", err)
				return
			}
			if i == 1 && len(recs)/3*3 < len(recs) {
				if err := testkit.Produce(context.Background(), e.brokers, inputTopic, recs[len(recs)/3*3:]); err != nil {
					t.Errorf("produce: %v", err)
				}
			}
			time.Sleep(2 * time.Second) // sleep ok: paces the broker restarts (the workers run between them)
		}
	}()
	ready := func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	errs := e.supervise(5*time.Minute, ready, func(int) *instance { return e.start(instOpts{maxRecs: 300}) })
	for _, err := range errs {
		t.Logf("a life ended with: %v", err)
	}
	if restarts != 2 {
		t.Fatalf("%d broker restarts, want 2", restarts)
	}
	e.checkFigure(exp, len(recs), len(errs), restarts, seed)
}

// malformed is the bad-input table: each record and the dead-letter reason
// it must get (header projector-reason).
var malformed = []struct {
	name, value, reason string
	nilValue            bool
	oversize            bool // larger than the dead-letter topic takes: TestFaultOversizeRecordDeadLettered
}{
	{name: "not JSON", value: `not json at all`, reason: "invalid:value"},
	{name: "JSON array", value: `[{"eventId":"a"}]`, reason: "invalid:value"},
	{name: "JSON string", value: `"CaseOpened"`, reason: "invalid:value"},
	{name: "JSON number", value: `42`, reason: "invalid:value"},
	{name: "JSON null", value: `null`, reason: "invalid:value"},
	{name: "empty value", value: ``, reason: "invalid:value"},
	{name: "null record value", nilValue: true, reason: "invalid:value"},
	{name: "whitespace only", value: "  \n\t ", reason: "invalid:value"},
	{name: "truncated object", value: `{"eventId":"t-1","eventType":"CaseUpdated","aggregateId":"BAD-1","aggregateVersion":3`, reason: "invalid:value"},
	{name: "trailing data", value: `{"eventId":"t-2","eventType":"CaseUpdated","aggregateId":"BAD-1","aggregateVersion":1} x`, reason: "invalid:value"},
	{name: "two objects", value: `{"eventId":"t-3","eventType":"E","aggregateId":"BAD-1","aggregateVersion":1}{}`, reason: "invalid:value"},
	{name: "invalid UTF-8", value: "{\"eventId\":\"t-4\xff\xfe\",\"eventType\":\"E\",\"aggregateId\":\"BAD-1\",\"aggregateVersion\":1}", reason: "invalid:value"},
	{name: "empty object", value: `{}`, reason: "invalid:eventId"},
	{name: "missing eventId", value: `{"eventType":"CaseUpdated","aggregateId":"BAD-1","aggregateVersion":1}`, reason: "invalid:eventId"},
	{name: "missing eventType", value: `{"eventId":"t-5","aggregateId":"BAD-1","aggregateVersion":1}`, reason: "invalid:eventType"},
	{name: "missing aggregateId", value: `{"eventId":"t-6","eventType":"CaseUpdated","aggregateVersion":1}`, reason: "invalid:aggregateId"},
	{name: "missing aggregateVersion (versioned projection)", value: `{"eventId":"t-7","eventType":"CaseUpdated","aggregateId":"BAD-2","aggregateType":"RegulatoryCase"}`, reason: "invalid:aggregateVersion"},
	{name: "null aggregateVersion", value: `{"eventId":"t-8","eventType":"CaseUpdated","aggregateId":"BAD-2","aggregateType":"RegulatoryCase","aggregateVersion":null}`, reason: "invalid:aggregateVersion"},
	{name: "empty eventId", value: `{"eventId":"","eventType":"CaseUpdated","aggregateId":"BAD-1","aggregateVersion":1}`, reason: "invalid:eventId"},
	{name: "empty aggregateId", value: `{"eventId":"t-9","eventType":"CaseUpdated","aggregateId":"","aggregateVersion":1}`, reason: "invalid:aggregateId"},
	{name: "empty eventType", value: `{"eventId":"t-10","eventType":"","aggregateId":"BAD-1","aggregateVersion":1}`, reason: "invalid:eventType"},
	{name: "oversize eventId", value: `{"eventId":"` + strings.Repeat("e", 513) + `","eventType":"CaseUpdated","aggregateId":"BAD-1","aggregateVersion":1}`, reason: "invalid:eventId"},
	{name: "oversize aggregateId", value: `{"eventId":"t-11","eventType":"CaseUpdated","aggregateId":"` + strings.Repeat("A", 513) + `","aggregateVersion":1}`, reason: "invalid:aggregateId"},
	{name: "eventId a number", value: `{"eventId":7,"eventType":"CaseUpdated","aggregateId":"BAD-1","aggregateVersion":1}`, reason: "invalid:eventId"},
	{name: "eventType a bool", value: `{"eventId":"t-12","eventType":true,"aggregateId":"BAD-1","aggregateVersion":1}`, reason: "invalid:eventType"},
	{name: "aggregateId an object", value: `{"eventId":"t-13","eventType":"E","aggregateId":{"id":1},"aggregateVersion":1}`, reason: "invalid:aggregateId"},
	{name: "tenantId a number", value: `{"eventId":"t-14","eventType":"E","aggregateId":"BAD-1","aggregateVersion":1,"tenantId":5}`, reason: "invalid:tenantId"},
	{name: "version 0", value: `{"eventId":"t-15","eventType":"CaseUpdated","aggregateId":"BAD-1","aggregateVersion":0}`, reason: "invalid:aggregateVersion"},
	{name: "version negative", value: `{"eventId":"t-16","eventType":"CaseUpdated","aggregateId":"BAD-1","aggregateVersion":-3}`, reason: "invalid:aggregateVersion"},
	{name: "version fractional", value: `{"eventId":"t-17","eventType":"CaseUpdated","aggregateId":"BAD-1","aggregateVersion":1.5}`, reason: "invalid:aggregateVersion"},
	{name: "version huge", value: `{"eventId":"t-18","eventType":"CaseUpdated","aggregateId":"BAD-1","aggregateVersion":99999999999999999999}`, reason: "invalid:aggregateVersion"},
	{name: "version overflowing exponent", value: `{"eventId":"t-19","eventType":"CaseUpdated","aggregateId":"BAD-1","aggregateVersion":1e400}`, reason: "invalid:aggregateVersion"},
	{name: "version a string", value: `{"eventId":"t-20","eventType":"CaseUpdated","aggregateId":"BAD-1","aggregateVersion":"2"}`, reason: "invalid:aggregateVersion"},
	{name: "unpaired surrogate in aggregateId", value: `{"eventId":"t-21","eventType":"E","aggregateId":"BAD-\ud800","aggregateVersion":1}`, reason: "invalid:aggregateId"},
	{name: "duplicate eventId member", value: `{"eventId":"t-22","eventType":"E","aggregateId":"BAD-1","aggregateVersion":1,"eventId":"t-23"}`, reason: "invalid:eventId"},
	{name: "occurredAt not RFC 3339", value: `{"eventId":"t-24","eventType":"E","aggregateId":"BAD-1","aggregateVersion":1,"occurredAt":"yesterday"}`, reason: "invalid:occurredAt"},
	{name: "payload duplicate keys", value: `{"eventId":"t-25","eventType":"E","aggregateId":"BAD-1","aggregateVersion":1,"payload":{"a":1,"a":2}}`, reason: "invalid:payload"},
	{name: "payload number overflow", value: `{"eventId":"t-26","eventType":"E","aggregateId":"BAD-1","aggregateVersion":1,"payload":{"n":1e400}}`, reason: "invalid:payload"},
	{name: "payload nested 100 deep", value: `{"eventId":"t-27","eventType":"E","aggregateId":"BAD-1","aggregateVersion":1,"payload":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, reason: "invalid:payload"},
	{name: "2 MB payload (over the 1 MiB limit)", value: `{"eventId":"t-28","eventType":"E","aggregateId":"BAD-1","aggregateVersion":1,"payload":"` + strings.Repeat("x", 2<<20) + `"}`, reason: "invalid:value", oversize: true},
	{name: "10 MB payload", value: `{"eventId":"t-29","eventType":"E","aggregateId":"BAD-1","aggregateVersion":1,"payload":"` + strings.Repeat("y", 10<<20) + `"}`, reason: "invalid:value", oversize: true},
}

// TestFaultMalformedRecords feeds the bad-input table through the processor
// end to end, between valid events of the same partition: each record gets
// its dead-letter reason, exactly once, and the partition keeps flowing
// (the valid events after them are applied).
func TestFaultMalformedRecords(t *testing.T) {
	t.Parallel()
	testMalformed(t, false)
}

// TestFaultOversizeRecordDeadLettered: records over the 1 MiB envelope
// limit (2 MB, 10 MB) on an input that accepts them must be dead-lettered
// with invalid:value like any other invalid record, and the partition must
// keep flowing.
func TestFaultOversizeRecordDeadLettered(t *testing.T) {
	t.Parallel()
	testMalformed(t, true)
}

func testMalformed(t *testing.T, oversize bool) {
	var table []int
	for i, m := range malformed {
		if m.oversize == oversize {
			table = append(table, i)
		}
	}
	if !oversize && len(table) < 25 {
		t.Fatalf("the table has %d records, want ≥ 25", len(table))
	}
	b, brokers := testkit.Broker(t, 1)
	e := &env{t: t, brokers: brokers, b: b, dir: t.TempDir()}
	ctx := context.Background()
	// The input accepts 16 MB records, as a topic carrying large events
	// would; one partition, so that every bad record sits between good ones.
	big := "16777216"
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ProducerBatchMaxBytes(16<<20), kgo.MaxBufferedBytes(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, map[string]*string{"max.message.bytes": &big}, inputTopic); err != nil {
		t.Fatal(err)
	}
	recs, exp := genWorkload(1001, 2_000, 200, func(o *workload.Options) { o.Invalid, o.Conflicts = 0, 0 })
	var in []*kgo.Record
	per := len(recs) / (len(table) + 1)
	for k, i := range table {
		m := malformed[i]
		for _, r := range recs[k*per : (k+1)*per] {
			in = append(in, &kgo.Record{Topic: inputTopic, Key: r.Key, Value: r.Value})
		}
		v := []byte(m.value)
		if m.nilValue {
			v = nil
		}
		in = append(in, &kgo.Record{Topic: inputTopic, Key: []byte(fmt.Sprintf("bad-%d", i)), Value: v})
	}
	for _, r := range recs[len(table)*per:] {
		in = append(in, &kgo.Record{Topic: inputTopic, Key: r.Key, Value: r.Value})
	}
	for _, r := range in {
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	inst := e.start(instOpts{maxRecs: 100})
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	go func() { // a processor that gives up must fail the test at once
		select {
		case err := <-inst.done:
			inst.done <- err
			if err != nil {
				cancel()
			}
		case <-wctx.Done():
		}
	}()
	if err := testkit.WaitCaughtUp(wctx, e.brokers, group, inputTopic); err != nil {
		select {
		case err := <-inst.done:
			t.Fatalf("the processor stopped instead of dead-lettering: %v", err)
		default:
			t.Fatal(err)
		}
	}
	cancel()
	if err := inst.stop(t); err != nil {
		t.Fatal(err)
	}
	got := map[string][]testkit.DeadLetter{} // by record key
	for _, r := range e.read(dlqTopic) {
		got[string(r.Key)] = append(got[string(r.Key)], testkit.DeadLetters([]*kgo.Record{r})...)
	}
	for _, i := range table {
		m := malformed[i]
		ds := got[fmt.Sprintf("bad-%d", i)]
		switch {
		case len(ds) == 0:
			t.Errorf("%d %s: not dead-lettered (want %s)", i, m.name, m.reason)
		case len(ds) > 1:
			t.Errorf("%d %s: dead-lettered %d times", i, m.name, len(ds))
		case ds[0].Reason != m.reason:
			t.Errorf("%d %s: reason %s (%s), want %s", i, m.name, ds[0].Reason, ds[0].Error, m.reason)
		}
	}
	// The figure's checkers see the dead letters by value: the empty and the
	// null value are the same there.
	exp.DeadLetterValues = map[string]string{}
	for _, i := range table {
		if m := malformed[i]; m.value != "" || m.nilValue {
			exp.DeadLetterValues[m.value] = m.reason
		}
	}
	e.checkFigureDL(exp, len(in), 0, len(table), 1001, false)
}
