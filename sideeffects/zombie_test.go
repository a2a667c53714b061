package sideeffects_test

// Fault-matrix rows for the executor's ownership of a partition
// (docs/reliability.md): a zombie cut off from the group coordinator, and a
// new owner that must wait for the previous owner's open transaction
// (verify_test.go). Both run two executor Workers of one group on the
// embedded broker, each calling its own receiver path, and check the ledger
// changelog – read_committed, record by record – as well as the receiver.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/app/broker"
	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/core/topicread"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/sideeffects"
	"github.com/projector-dev/projector/sideeffects/effect"
	"github.com/projector-dev/projector/sideeffects/webhook"
)

const (
	fxName    = "fx"
	fxEffects = "fx.effects"
	fxEffect  = "hook"
)

// netGate is a switchable network between one client and the broker: every
// connection the client dials (kgo.Dialer) is relayed, request frame by
// request frame, through the gate.
//
//   - gateOpen forwards everything.
//   - gatePartition stops forwarding in both directions: bytes sent meanwhile
//     wait in the relay and the socket buffers, reads and writes stall, new
//     dials hang – a network partition. Reopening delivers what waited, late,
//     as TCP does once a partition heals.
//   - gateMembership cuts the client off from the group coordinator's
//     membership protocol only: a JoinGroup, SyncGroup, Heartbeat or
//     LeaveGroup request is never forwarded; the connection carrying it is
//     reset once the requests before it are answered (so no other request
//     is lost on the way). Everything else – produce, fetch, the
//     transaction coordinator, TxnOffsetCommit – still gets through: the
//     group drops the member when its session expires, and the member is
//     not told until its own heartbeats give up (a zombie).
type netGate struct {
	mu      sync.Mutex
	mode    int
	changed chan struct{} // closed and replaced on every mode change
	conns   []net.Conn
	resets  int // connections reset for a membership request
}

const (
	gateOpen = iota
	gatePartition
	gateMembership
)

func newNetGate(t *testing.T) *netGate {
	g := &netGate{changed: make(chan struct{})}
	t.Cleanup(func() {
		g.set(gateOpen)
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, c := range g.conns {
			c.Close()
		}
	})
	return g
}

func (g *netGate) set(mode int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mode != mode {
		g.mode = mode
		close(g.changed)
		g.changed = make(chan struct{})
	}
}

func (g *netGate) state() (int, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mode, g.changed
}

// passable waits until the gate is not partitioned (or ctx ends).
func (g *netGate) passable(ctx context.Context) error {
	for {
		mode, changed := g.state()
		if mode != gatePartition {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (g *netGate) dial(ctx context.Context, network, host string) (net.Conn, error) {
	if err := g.passable(ctx); err != nil {
		return nil, err
	}
	var d net.Dialer
	srv, err := d.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	cli, mid := net.Pipe() // synchronous: a stalled relay stalls the client's writes
	g.mu.Lock()
	g.conns = append(g.conns, srv, mid)
	g.mu.Unlock()
	var outstanding atomic.Int64 // requests forwarded and not yet answered
	go g.requests(mid, srv, &outstanding)
	go g.responses(srv, mid, &outstanding)
	return cli, nil
}

// membershipKey: the requests of the classic group membership protocol.
func membershipKey(key int16) bool {
	switch kmsg.Key(key) {
	case kmsg.JoinGroup, kmsg.SyncGroup, kmsg.Heartbeat, kmsg.LeaveGroup:
		return true
	}
	return false
}

// readFrame reads one size-prefixed Kafka frame (requests and responses alike).
func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	frame := make([]byte, 4+binary.BigEndian.Uint32(size[:]))
	copy(frame, size[:])
	_, err := io.ReadFull(r, frame[4:])
	return frame, err
}

func (g *netGate) requests(cli, srv net.Conn, outstanding *atomic.Int64) {
	defer srv.Close()
	defer cli.Close()
	for {
		frame, err := readFrame(cli)
		if err != nil {
			return
		}
		key := int16(-1)
		if len(frame) >= 6 {
			key = int16(binary.BigEndian.Uint16(frame[4:6]))
		}
		for {
			if g.passable(context.Background()) != nil {
				return
			}
			mode, changed := g.state()
			if mode == gatePartition {
				continue
			}
			if mode == gateMembership && membershipKey(key) {
				// Let the answers to earlier requests through, then
				// reset the connection without forwarding this one.
				for outstanding.Load() > 0 {
					select {
					case <-changed:
					case <-time.After(time.Millisecond):
					}
				}
				if mode, _ := g.state(); mode != gateMembership {
					continue
				}
				g.mu.Lock()
				g.resets++
				g.mu.Unlock()
				return
			}
			break
		}
		outstanding.Add(1)
		if _, err := srv.Write(frame); err != nil {
			return
		}
	}
}

func (g *netGate) responses(srv, cli net.Conn, outstanding *atomic.Int64) {
	defer srv.Close()
	defer cli.Close()
	for {
		frame, err := readFrame(srv)
		if err != nil {
			return
		}
		if g.passable(context.Background()) != nil {
			return
		}
		if _, err := cli.Write(frame); err != nil {
			return
		}
		outstanding.Add(-1)
	}
}

func (g *netGate) membershipResets() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.resets
}

// fxCall is one request a receiver path got.
type fxCall struct {
	by         string // the receiver path: the calling instance
	key        string
	start, end time.Time
}

// fxReceiver is one logical webhook service honouring Idempotency-Key (an
// effect applied once per key; a repeat gets the first answer), reached by
// each executor instance on its own path so that calls can be told apart.
// Every call takes delay.
type fxReceiver struct {
	delay time.Duration
	// hang, if set, picks calls that apply the effect and then never
	// answer (until the caller gives up).
	hang    func(by, key string) bool
	srv     *httptest.Server
	stop    chan struct{}
	mu      sync.Mutex
	calls   []fxCall
	applied map[string]int
	active  map[string]map[string]int // key → caller → calls running
	overlap []fxOverlap
}

// fxOverlap is a call of a key that started while another call of the same
// key was running; cross: the other call came from the other instance.
type fxOverlap struct {
	key, by string
	at      time.Time
	cross   bool
}

func (o fxOverlap) String() string {
	return fmt.Sprintf("%s called by %s at %s", o.key, o.by, o.at.Format("15:04:05.000"))
}

func newFxReceiver(t *testing.T, delay time.Duration, hang func(by, key string) bool) *fxReceiver {
	rc := &fxReceiver{delay: delay, hang: hang, stop: make(chan struct{}), applied: map[string]int{}, active: map[string]map[string]int{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(func() {
		close(rc.stop)
		rc.srv.Close()
	})
	return rc
}

func (rc *fxReceiver) url(by string) string { return rc.srv.URL + "/" + by }

func (rc *fxReceiver) serve(w http.ResponseWriter, r *http.Request) {
	// Read the body first: only then does the server watch the connection
	// and cancel r.Context() when the caller gives up (a hanging call ends
	// at the caller's deadline, as docs/contract.md#side-effect-webhook
	// assumes of a receiver).
	_, _ = io.Copy(io.Discard, r.Body)
	by, key := strings.TrimPrefix(r.URL.Path, "/"), r.Header.Get("Idempotency-Key")
	start := time.Now()
	rc.mu.Lock()
	i := len(rc.calls)
	rc.calls = append(rc.calls, fxCall{by: by, key: key, start: start})
	if rc.active[key] == nil {
		rc.active[key] = map[string]int{}
	}
	for other, n := range rc.active[key] {
		if n > 0 {
			rc.overlap = append(rc.overlap, fxOverlap{key: key, by: by, at: start, cross: other != by})
		}
	}
	rc.active[key][by]++
	rc.mu.Unlock()
	if rc.hang != nil && rc.hang(by, key) {
		select {
		case <-r.Context().Done():
		case <-rc.stop:
		}
	} else {
		select {
		case <-time.After(rc.delay):
		case <-rc.stop:
		}
	}
	rc.mu.Lock()
	rc.active[key][by]--
	if rc.applied[key] == 0 {
		rc.applied[key] = 1
	}
	rc.calls[i].end = time.Now()
	rc.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"ref-%s"}`, key)
}

func (rc *fxReceiver) snapshot() (calls []fxCall, overlap []fxOverlap, applied map[string]int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	applied = make(map[string]int, len(rc.applied))
	for k, n := range rc.applied {
		applied[k] = n
	}
	return slices.Clone(rc.calls), slices.Clone(rc.overlap), applied
}

// fxWorker is one executor instance.
type fxWorker struct {
	id     string
	w      *sideeffects.Worker
	st     *state.Store
	cancel context.CancelFunc
	done   chan error
	err    error
	ended  bool
	ran    atomic.Bool // Run has returned

	mu      sync.Mutex
	changes []fxChange // committed ledger transitions, as OnChange saw them
}

type fxChange struct {
	at    time.Time
	entry effect.Entry
}

type fxOpts struct {
	brokers            []string
	id, url, dir       string
	clientOpts         []kgo.Opt
	transactionTimeout time.Duration
	sessionTimeout     time.Duration
	webhookTimeout     time.Duration
	workers            int
}

func fxLogger() *slog.Logger {
	if os.Getenv("PROJECTOR_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func startFxWorker(t *testing.T, o fxOpts) *fxWorker {
	t.Helper()
	st, err := state.Open(filepath.Join(o.dir, o.id), state.Options{CacheBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	fw := &fxWorker{id: o.id, st: st, done: make(chan error, 1)}
	fw.w, err = sideeffects.NewWorker(withStore(st, sideeffects.WorkerConfig{
		Session: sideeffects.Session{
			Name: fxName, InstanceID: o.id, Brokers: o.brokers, ClientOpts: o.clientOpts,
			DeadLetterTopic: fxName + ".deadletter", Partitions: 2,
			TransactionTimeout: o.transactionTimeout, SessionTimeout: o.sessionTimeout,
			Logger: fxLogger().With("instance", o.id),
		},
		EffectsTopic: fxEffects,
		Effects: map[string]sideeffects.Effect{fxEffect: {
			Caller:      &webhook.Client{URL: o.url, Timeout: o.webhookTimeout},
			MaxAttempts: 20, OnUnknown: config.OnUnknownRetry,
		}},
		Workers: o.workers,

		OnChange: func(e effect.Entry) {
			fw.mu.Lock()
			fw.changes = append(fw.changes, fxChange{at: time.Now(), entry: e})
			fw.mu.Unlock()
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	fw.cancel = cancel
	go func() {
		err := fw.w.Run(ctx)
		fw.ran.Store(true)
		fw.done <- err
	}()
	t.Cleanup(func() {
		fw.stop(t)
		if err := fw.st.Close(); err != nil {
			t.Errorf("worker %s: close store: %v", fw.id, err)
		}
	})
	return fw
}

// returned reports whether Run has returned (and keeps its error).
func (fw *fxWorker) returned() bool {
	if fw.ended {
		return true
	}
	select {
	case fw.err = <-fw.done:
		fw.ended = true
	default:
	}
	return fw.ended
}

// stop cancels Run and waits for it; it returns Run's error.
func (fw *fxWorker) stop(t *testing.T) error {
	t.Helper()
	if fw.cancel == nil {
		return fw.err
	}
	fw.cancel()
	fw.cancel = nil
	if !fw.ended {
		select {
		case fw.err = <-fw.done:
			fw.ended = true
		case <-time.After(45 * time.Second):
			t.Errorf("worker %s: Run did not return within 45s of its cancellation", fw.id)
			return fw.err
		}
	}
	return fw.err
}

// succeeded counts the keys this instance committed as succeeded.
func (fw *fxWorker) succeeded() int {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	n := 0
	for _, c := range fw.changes {
		if c.entry.Status == effect.Succeeded {
			n++
		}
	}
	return n
}

// changesAfter lists the transitions this instance committed after t.
func (fw *fxWorker) changesAfter(t time.Time) []fxChange {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	var out []fxChange
	for _, c := range fw.changes {
		if c.at.After(t) {
			out = append(out, c)
		}
	}
	return out
}

// fxSetup starts the embedded broker, creates the effects topic (2
// partitions) and produces one intent for each of n keys.
func fxSetup(t *testing.T, n int) (b *broker.Embedded, brokers, keys []string) {
	t.Helper()
	b, brokers = testkit.Broker(t, 2, fxEffects)
	recs := make([]workload.Record, n)
	for i := range recs {
		keys = append(keys, fmt.Sprintf("k%03d", i))
		recs[i] = fxIntent(keys[i])
	}
	if err := testkit.Produce(context.Background(), brokers, fxEffects, recs); err != nil {
		t.Fatal(err)
	}
	return b, brokers, keys
}

// fxIntent is the effects-topic record of one intent.
func fxIntent(key string) workload.Record {
	v, _ := json.Marshal(map[string]string{"key": key, "effect": fxEffect})
	return workload.Record{Key: []byte(key), Value: v}
}

// ledgerRecord is one committed ledger changelog record.
type ledgerRecord struct {
	partition  int32
	offset     int64
	producerID int64
	value      []byte
	entry      effect.Entry
}

// commitMarker is the marker that committed a transaction on a changelog
// partition: its timestamp is the broker's clock at the commit.
type commitMarker struct {
	partition  int32
	offset     int64
	producerID int64
	at         time.Time
}

// committedAt is when the broker committed the transaction that holds
// record r: the first commit marker of r's producer after it on its
// partition (zero if none).
func committedAt(r ledgerRecord, marks []commitMarker) time.Time {
	for _, m := range marks {
		if m.partition == r.partition && m.producerID == r.producerID && m.offset > r.offset {
			return m.at
		}
	}
	return time.Time{}
}

// readLedgerLog reads the ledger changelog read_committed, in offset order
// per partition, up to its last stable offsets: the ledger records and the
// commit markers. It reads with topicread, the project's committed-record
// reader, whose end rule holds where the record just below an end is one
// read_committed never returns (a zombie's aborted write followed by a
// successor's transaction still open at the listing).
func readLedgerLog(t *testing.T, brokers []string) ([]ledgerRecord, []commitMarker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	topic := sideeffects.ChangelogTopic(fxName, fxEffects)
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	ends, _, err := topicread.StableEnds(ctx, opts, topic)
	if err != nil {
		t.Fatalf("read the ledger changelog: list its ends: %v", err)
	}
	var recs []ledgerRecord
	var marks []commitMarker
	err = topicread.Partitions(ctx, opts, ends, topicread.Options{Control: true}, func(r *kgo.Record) error {
		switch {
		case r.Attrs.IsControl():
			if len(r.Key) >= 4 && binary.BigEndian.Uint16(r.Key[2:4]) == 1 { // commit
				marks = append(marks, commitMarker{partition: r.Partition, offset: r.Offset, producerID: r.ProducerID, at: r.Timestamp})
			}
		case len(r.Key) > 0 && r.Key[0] == effect.KeyPrefix && r.Value != nil:
			e, err := effect.DecodeEntry(r.Value)
			if err != nil {
				t.Errorf("ledger record %d/%d: %v", r.Partition, r.Offset, err)
				return nil
			}
			recs = append(recs, ledgerRecord{partition: r.Partition, offset: r.Offset, producerID: r.ProducerID, value: r.Value, entry: e})
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read the ledger changelog up to %v: %v", ends, err)
	}
	return recs, marks
}

// checkLedgerLog checks every key's committed history: each record is a legal
// transition from the one before (pending → in-flight → succeeded | failed |
// pending | unknown; unknown → in-flight | succeeded | failed, and → pending
// or unknown again when a report or a hand-over records that attempt,
// Ledger.Settle), a start counts
// exactly one attempt more, a withdrawal (in-flight or unknown → pending,
// Ledger.Withdraw) exactly one less, and nothing follows a terminal status. A second
// owner that starts a key another has in flight, or a zombie that records an
// outcome over a successor's, breaks the chain. It returns the final entries
// and the number of illegal records; who names a record's producer.
func checkLedgerLog(t *testing.T, log []ledgerRecord, who func(producerID int64) string) (map[string]effect.Entry, int) {
	t.Helper()
	final := map[string]effect.Entry{}
	legal := map[effect.Status][]effect.Status{
		effect.Pending:  {effect.InFlight},
		effect.InFlight: {effect.Succeeded, effect.Failed, effect.Pending, effect.Unknown},
		effect.Unknown:  {effect.InFlight, effect.Succeeded, effect.Failed, effect.Pending, effect.Unknown},
	}
	bad := 0
	for _, r := range log {
		e := r.entry
		prev, seen := final[e.Key]
		var problem string
		switch {
		case !seen && (e.Status != effect.Pending || e.Attempts != 0):
			problem = "first record is not a fresh pending entry"
		case seen && !slices.Contains(legal[prev.Status], e.Status):
			problem = fmt.Sprintf("%s → %s", prev.Status, e.Status)
		case seen && e.Status == effect.InFlight && e.Attempts != prev.Attempts+1:
			problem = fmt.Sprintf("start %d after attempt %d", e.Attempts, prev.Attempts)
		case seen && e.Status == effect.Pending && e.Attempts == prev.Attempts-1 && len(e.History) < len(prev.History):
			// a withdrawal: the attempt in flight never called, not counted
		case seen && e.Status != effect.InFlight && e.Attempts != prev.Attempts:
			problem = fmt.Sprintf("%s changed attempts %d → %d", e.Status, prev.Attempts, e.Attempts)
		}
		if problem != "" {
			if bad++; bad <= 10 {
				t.Errorf("ledger key %s at %d/%d (written by %s): illegal history: %s", e.Key, r.partition, r.offset, who(r.producerID), problem)
			}
		}
		final[e.Key] = e
	}
	if bad > 10 {
		t.Errorf("... %d illegal ledger records in all", bad)
	}
	return final, bad
}

// checkExactlyOnce checks that every key ended succeeded, that the receiver
// got at least one request and at most one per attempt the ledger committed
// (a call is made only after its attempt committed; an attempt may end
// before its call, e.g. at a deadline that passed), applied each key once,
// and never ran two requests of one key at once. It returns the number
// of requests, of keys retried, and of keys or overlaps that failed a check.
func checkExactlyOnce(t *testing.T, keys []string, final map[string]effect.Entry, rc *fxReceiver) (requests, retried, bad int) {
	t.Helper()
	calls, overlap, applied := rc.snapshot()
	perKey := map[string]int{}
	for _, c := range calls {
		perKey[c.key]++
	}
	for _, k := range keys {
		e, ok := final[k]
		if !ok || e.Status != effect.Succeeded || perKey[k] > e.Attempts || perKey[k] == 0 || applied[k] != 1 {
			bad++
		}
		switch {
		case !ok:
			t.Errorf("key %s: not in the ledger", k)
		case e.Status != effect.Succeeded:
			t.Errorf("key %s: ledger status %s, want succeeded", k, e.Status)
		case perKey[k] > e.Attempts || perKey[k] == 0:
			t.Errorf("key %s: the receiver got %d requests, the ledger committed %d attempts", k, perKey[k], e.Attempts)
		}
		if applied[k] != 1 {
			t.Errorf("key %s: applied %d times", k, applied[k])
		}
		if e.Attempts > 1 {
			retried++
		}
	}
	for _, o := range overlap {
		t.Errorf("two requests of one key at once: %s", o)
		bad++
	}
	return len(calls), retried, bad
}

// TestExecutorZombieCannotCommit is the fault-matrix row "executor cut off
// from the group coordinator (zombie)": instance a owns both effects
// partitions and is calling its receiver when it is cut off, and instance b
// joins. The group drops a when its session expires, and b takes the
// partitions, recovers a's calls in flight (unknown, retried with the same
// key) and executes the rest. Then a's network heals. a must commit no
// ledger transition after the cut – its transactions are fenced by the
// group generation it no longer holds – start no call, and drop the tasks it
// held; every key ends succeeded with a legal ledger history, one request
// per committed attempt, never two requests of one key at once.
//
// Two cuts: "partition" stalls all of a's traffic (a learns nothing, sends
// nothing; what it queued arrives late when the network heals);
// "membership" cuts only its group membership requests, so a keeps
// reaching the partition leader and the transaction coordinator while the
// group drops it – the zombie that has been evicted and not yet told.
func TestExecutorZombieCannotCommit(t *testing.T) {
	t.Parallel() // mostly waits: for the group session of the cut-off instance to expire
	for _, tc := range []struct {
		name string
		mode int
	}{{"partition", gatePartition}, {"membership", gateMembership}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each cut has its own broker, gate, receiver and state
			testZombie(t, tc.mode)
		})
	}
}

func testZombie(t *testing.T, mode int) {
	// The membership cut needs a still to have work when the group drops
	// it, a few seconds after the cut: more keys, executed more slowly.
	nKeys, delay, workers := 48, 300*time.Millisecond, 2
	if mode == gateMembership {
		nKeys, delay, workers = 120, 200*time.Millisecond, 1
	}
	_, brokers, keys := fxSetup(t, nKeys)
	rc := newFxReceiver(t, delay, nil)
	dir := t.TempDir()
	gate := newNetGate(t)
	opts := func(id string, copts ...kgo.Opt) fxOpts {
		return fxOpts{brokers: brokers, id: id, url: rc.url(id), dir: dir, clientOpts: copts,
			transactionTimeout: 10 * time.Second, sessionTimeout: 6 * time.Second, webhookTimeout: 2 * time.Second, workers: workers}
	}
	a := startFxWorker(t, opts("a", kgo.Dialer(gate.dial)))
	testkit.Await(t, 30*time.Second, "a to own both partitions and succeed 10 keys", func() bool {
		if a.returned() {
			t.Fatalf("a: Run returned: %v", a.err)
		}
		return len(a.w.Stats().Assigned()) == 2 && a.succeeded() >= 10
	})

	// a's producer id: every ledger record so far is a's.
	before, _ := readLedgerLog(t, brokers)
	pidA := before[0].producerID
	for _, r := range before {
		if r.producerID != pidA {
			t.Fatalf("two producers wrote the ledger before b started: %d and %d", pidA, r.producerID)
		}
	}

	gate.set(mode)
	cutAt := time.Now()
	abortedAtCut, failedAtCut := a.w.Stats().Transactions("aborted"), a.w.Stats().Transactions("failed")
	// When does a drop the tasks it held (Assigned empty, or Run returned)?
	droppedC := make(chan time.Time, 1)
	go func() {
		// Logged only (to 100 ms); the select below bounds the wait.
		_ = testkit.WaitFor(context.Background(), 2*time.Minute, func() bool { return len(a.w.Stats().Assigned()) == 0 || a.ran.Load() })
		droppedC <- time.Now()
	}()

	b := startFxWorker(t, opts("b"))
	testkit.Await(t, 30*time.Second, "b to be assigned partitions", func() bool { return len(b.w.Stats().Assigned()) > 0 })
	assignedB := time.Now()
	testkit.Await(t, 45*time.Second, "b to own both partitions and every key to succeed", func() bool {
		if len(b.w.Stats().Assigned()) != 2 {
			return false
		}
		ok := 0
		recs, _ := readLedgerLog(t, brokers)
		for _, e := range lastEntries(recs) {
			if e.Status == effect.Succeeded {
				ok++
			}
		}
		return ok == nKeys
	})
	// From when may a commit or call nothing more? Cut off from everything,
	// from the cut (and it holds no generation by the heal); cut off from
	// the coordinator only, it still owns its partitions until the group
	// drops it, and the group has dropped it when b is assigned.
	zombieFrom := cutAt
	if mode == gateMembership {
		zombieFrom = assignedB
	}
	margin := zombieFrom.Add(250 * time.Millisecond)

	// Heal a's network. It must find out it was dropped and drop its tasks
	// (its Run may also stop); a rejoin may then give it partitions again,
	// with nothing left to do.
	gate.set(gateOpen)
	healAt := time.Now()
	var droppedAt time.Time
	select {
	case droppedAt = <-droppedC:
	case <-time.After(40 * time.Second):
		t.Fatal("a did not drop the tasks it held at the cut within 40s of the heal")
	}
	// Let anything a still had queued reach the broker and settle.
	testkit.Await(t, 40*time.Second, "a to be ready again or stopped", func() bool {
		return a.returned() || (time.Since(healAt) > 3*time.Second && a.w.Stats().Ready())
	})
	// sleep ok: a settle margin only; the zombie checks below read the ledger log after both workers stopped, and a's Run returns only once its calls in progress are recorded.
	time.Sleep(time.Second)
	aborted := a.w.Stats().Transactions("aborted") - abortedAtCut
	failed := a.w.Stats().Transactions("failed") - failedAtCut
	errA := a.stop(t)
	if err := b.stop(t); err != nil {
		t.Errorf("b: Run: %v", err)
	}

	log, marks := readLedgerLog(t, brokers)
	zombieCommits := 0
	for _, m := range marks {
		if m.producerID == pidA && m.at.After(margin) {
			if zombieCommits++; zombieCommits <= 5 {
				t.Errorf("a committed a ledger transaction on partition %d at cut+%s, after it was cut off and dropped",
					m.partition, m.at.Sub(cutAt).Round(time.Millisecond))
			}
		}
	}
	// a may learn late of a commit it sent before the cut (the answer to
	// its EndTxn lost in the cut, retried at the heal): a late report is
	// a zombie's only if the broker did not commit that very record of
	// a's before the margin.
	var late []fxChange
	lateOfEarly := 0
	for _, c := range a.changesAfter(margin) {
		early := false
		for _, r := range log {
			if r.producerID == pidA && r.entry.Key == c.entry.Key && r.entry.Status == c.entry.Status && r.entry.Attempts == c.entry.Attempts {
				if at := committedAt(r, marks); !at.IsZero() && !at.After(margin) {
					early = true
				}
			}
		}
		if early {
			lateOfEarly++
		} else {
			late = append(late, c)
		}
	}
	if len(late) > 0 {
		t.Errorf("a reported %d committed ledger transitions after it was dropped that the broker did not commit before (first: %s %s at cut+%s)",
			len(late), late[0].entry.Key, late[0].entry.Status, late[0].at.Sub(cutAt).Round(time.Millisecond))
	}
	if lateOfEarly > 0 {
		t.Logf("a reported %d transitions late that the broker committed before the cut (their EndTxn answer was lost in it)", lateOfEarly)
	}
	calls, _, _ := rc.snapshot()
	byA, byB, zombieCalls := 0, 0, 0
	for _, c := range calls {
		if c.by == "b" {
			byB++
			continue
		}
		byA++
		if c.start.After(margin) {
			if zombieCalls++; zombieCalls <= 5 {
				t.Errorf("a called %s at cut+%s, after it was cut off and dropped", c.key, c.start.Sub(cutAt).Round(time.Millisecond))
			}
		}
	}
	final, illegal := checkLedgerLog(t, log, func(pid int64) string {
		if pid == pidA {
			return "a"
		}
		return "b"
	})
	requests, retried, notOnce := checkExactlyOnce(t, keys, final, rc)
	// Proof the fault landed: a called keys whose outcome it could not
	// record (its last ledger record of them is its start: the update was
	// refused or its transaction aborted), and aborted transactions.
	lastByA := map[string]effect.Entry{}
	for _, r := range log {
		if r.producerID == pidA {
			lastByA[r.entry.Key] = r.entry
		}
	}
	calledByA := map[string]bool{}
	for _, c := range calls {
		if c.by == "a" {
			calledByA[c.key] = true
		}
	}
	lostOutcomes := 0
	for k, e := range lastByA {
		if e.Status == effect.InFlight && calledByA[k] {
			lostOutcomes++
		}
	}
	if aborted+failed+int64(lostOutcomes) == 0 && errA == nil {
		t.Errorf("a lost no outcome, aborted no transaction after the cut and did not stop: the cut did not land")
	}
	// With only its membership cut, a still reaches the effects topic: the
	// outcomes it could not record reach b as reports (Command op
	// "outcome"), which b records instead of calling again.
	if mode == gateMembership && retried > 0 {
		t.Errorf("b retried %d keys although a reported the outcomes it could not record (%d)", retried, lostOutcomes)
	}
	name := map[int]string{gatePartition: "network partition", gateMembership: "membership requests cut"}[mode]
	t.Logf("%d keys; a cut off (%s) for %s, %d membership connections reset; b assigned at cut+%s; a dropped its tasks at cut+%s; a: %d requests, %d outcomes it could not record, %d transactions aborted and %d failed after the cut, Run returned %v; b: %d requests, %d keys retried after an unknown outcome; %d requests in all; zombie commits %d, zombie calls %d, illegal ledger transitions %d, keys not executed exactly once %d",
		nKeys, name, healAt.Sub(cutAt).Round(100*time.Millisecond), gate.membershipResets(),
		assignedB.Sub(cutAt).Round(100*time.Millisecond), droppedAt.Sub(cutAt).Round(100*time.Millisecond),
		byA, lostOutcomes, aborted, failed, errA, byB, retried, requests, zombieCommits, zombieCalls, illegal, notOnce)
}

// lastEntries is each key's last committed entry (no checks; for polling).
func lastEntries(log []ledgerRecord) map[string]effect.Entry {
	final := map[string]effect.Entry{}
	for _, r := range log {
		final[r.entry.Key] = r.entry
	}
	return final
}
