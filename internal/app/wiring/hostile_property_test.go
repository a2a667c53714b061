package wiring_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/sideeffects/sideeffectstest"
)

// hostilePropertyConfig: one worker (processor, executor, ingress) whose
// side effects call the test's receiver. notify runs for every applied
// Opened and Updated; byref keys on a payload field, so an event chooses
// its key's length. Three attempts: a key no HTTP header can carry (a
// control character in an aggregate id) fails in a second, not in 8.
const hostilePropertyConfig = `name: hp
kafka:
  brokers: [%s]
  instanceId: hp1
  input: [hp-events]
  deadLetterTopic: hp.dlq
  effectsTopic: hp.effects
  sessionTimeout: 6s
  maxRecordBytes: %d
state: {dir: %q}
http: {listen: %q}
ingress: {listen: %q, receiptsTopic: hp.receipts, timeout: 60s}
projections:
  - name: cases
    topic: hp-cases.v1
    events: {Opened: merge, Updated: merge, Closed: delete}
sideEffects:
  - name: notify
    on: [Opened, Updated]
    key: "n:{aggregateId}:v{aggregateVersion}"
    webhook: {url: %q, timeout: 5s}
    maxAttempts: 3
  - name: byref
    on: [Flagged]
    key: "r:{payload.ref}"
    webhook: {url: %q, timeout: 5s}
    maxAttempts: 3
`

// hpPartitions is the partition count of every topic the worker reads.
const hpPartitions = 4

// hostileSize is the number of hostile records per topic (input, effects;
// half as many on the receipts topic): PROJECTOR_HOSTILE_PROPERTY_RECORDS,
// or a small default for CI that still holds every kind.
func hostileSize(t *testing.T) int {
	if s := os.Getenv("PROJECTOR_HOSTILE_PROPERTY_RECORDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("PROJECTOR_HOSTILE_PROPERTY_RECORDS=%q: want a positive count", s)
		}
		return n
	}
	return len(inputKinds())
}

// hostileMaxRecord is kafka.maxRecordBytes of the run: the default (1 MiB)
// for a run sized by PROJECTOR_HOSTILE_PROPERTY_RECORDS, 256 KiB in CI so
// that its near-limit records move a quarter of the bytes (under -race,
// reading the topics back is most of its time). Either way the topics
// take 512 KiB + 16 KiB at least (eos.MaxBatchBytes), so some sizes that
// outgrow a 1 MiB limit on the executor's changelog (a long key stored
// three times) only fail at 1 MiB.
func hostileMaxRecord() int {
	if os.Getenv("PROJECTOR_HOSTILE_PROPERTY_RECORDS") != "" {
		return int(config.Default().Kafka.MaxRecordBytes)
	}
	return 256 << 10
}

// onlyKinds keeps the kinds PROJECTOR_HOSTILE_PROPERTY_KINDS lists
// (comma-separated), for a closer look at some; unset, every kind runs.
func onlyKinds(kinds map[string]kindFunc) map[string]kindFunc {
	only := os.Getenv("PROJECTOR_HOSTILE_PROPERTY_KINDS")
	if only == "" {
		return kinds
	}
	out := map[string]kindFunc{}
	for _, k := range strings.Split(only, ",") {
		if f, ok := kinds[k]; ok {
			out[k] = f
		}
	}
	return out
}

// hostileSeed is PROJECTOR_HOSTILE_PROPERTY_SEED, or a new seed each run
// (printed, so any run can be repeated).
func hostileSeed(t *testing.T) uint64 {
	if s := os.Getenv("PROJECTOR_HOSTILE_PROPERTY_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("PROJECTOR_HOSTILE_PROPERTY_SEED=%q: %v", s, err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

// hostileRun is the property test's world: the broker, the worker, the
// receiver and what was produced.
type hostileRun struct {
	t        *testing.T
	brokers  []string
	a        *wiring.App
	exited   chan struct{} // closed when Run returned, with its error in runErr
	runErr   error
	httpAddr string
	ingress  string
	rc       *sideeffectstest.IdemReceiver
	logs     *logCount
	maxBatch int32

	hostile []*hostile // every hostile record produced, with its offset
	valid   expected   // what the valid records must produce
	// produced maps topic/partition/offset to the hostile record there.
	produced map[string]*hostile
	posts    []ingressPost
	// final and books are the accounts when the run settled, and the
	// committed records they were drawn from.
	final []*account
	books books
}

// TestNoRecordStopsAPartition is issue 22's property: no record stops a
// partition. Every topic the worker consumes – the input (events and
// skip-gap commands), the effects topic (intents, resolve and outcome
// commands) and the ingress's receipts topic – gets generated hostile
// records (seeded: the seed is printed; PROJECTOR_HOSTILE_PROPERTY_SEED
// repeats a run), each round followed by valid records on every partition.
// The worker must never exit and stay ready; every hostile record must end
// in an outcome or a dead letter with a reason (counted per topic: records
// = outcomes + dead letters, nothing unaccounted), every valid record after
// them must be processed (its projection records, exactly) and every side
// effect after them called, once. PROJECTOR_HOSTILE_PROPERTY_RECORDS sets
// the size (docs/reliability.md).
func TestNoRecordStopsAPartition(t *testing.T) {
	n, seed := hostileSize(t), hostileSeed(t)
	t.Logf("seed %d (PROJECTOR_HOSTILE_PROPERTY_SEED=%d repeats it), %d hostile records per topic", seed, seed, n)
	if only := os.Getenv("PROJECTOR_HOSTILE_PROPERTY_KINDS"); only != "" {
		t.Logf("only the kinds in PROJECTOR_HOSTILE_PROPERTY_KINDS=%s", only)
	}
	h := startHostileRun(t)
	g := &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), maxRecord: int(h.a.Config.Kafka.MaxRecordBytes), partitions: hpPartitions}
	in, fx, rcpt := g.cycle(onlyKinds(inputKinds()), n), g.cycle(onlyKinds(effectsKinds()), n),
		g.cycle(onlyKinds(receiptKinds()), max(n/2, len(receiptKinds())))
	rounds := max(2, n/100)
	start := time.Now()
	for r := range rounds {
		batch := slices.Concat(chunk(in, r, rounds), chunk(fx, r, rounds), chunk(rcpt, r, rounds))
		h.round(r, batch)
	}
	produced := time.Since(start)
	h.settle()
	t.Logf("%d rounds produced in %s, settled %s later", rounds, produced.Round(time.Millisecond), (time.Since(start) - produced).Round(time.Millisecond))
	h.check()
}

// chunk is the r-th of rounds slices of hs.
func chunk(hs []hostile, r, rounds int) []hostile {
	return hs[r*len(hs)/rounds : (r+1)*len(hs)/rounds]
}

func startHostileRun(t *testing.T) *hostileRun {
	t.Helper()
	b, brokers := testkit.Broker(t, hpPartitions)
	maxRecord := hostileMaxRecord()
	maxBatch := int32(eos.MaxBatchBytes(maxRecord))
	big := strconv.Itoa(int(maxBatch))
	compact := "compact"
	ctx := context.Background()
	for topic, cfgs := range map[string]map[string]*string{
		hpInput: {"max.message.bytes": &big}, hpEffects: {"max.message.bytes": &big},
		hpReceipts: {"max.message.bytes": &big, "cleanup.policy": &compact},
	} {
		if err := testkit.CreateTopicWith(ctx, brokers, topic, hpPartitions, cfgs); err != nil {
			t.Fatal(err)
		}
	}
	h := &hostileRun{t: t, brokers: brokers, exited: make(chan struct{}), maxBatch: maxBatch,
		rc: sideeffectstest.NewIdemReceiver(t, func() time.Duration { return 0 }), logs: newLogCount(),
		produced: map[string]*hostile{}, valid: expected{versions: map[string][]int64{}}}
	src := fmt.Sprintf(hostilePropertyConfig, b.Addr(), maxRecord, filepath.Join(t.TempDir(), "state"), anyPort, anyPort, h.rc.URL, h.rc.URL)
	cfg, err := config.Parse([]byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	if h.a, err = wiring.New(cfg, wiring.Options{Logger: slog.New(h.logs)}); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	go func() {
		h.runErr = h.a.Run(runCtx)
		close(h.exited)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.exited:
			if h.runErr != nil && !t.Failed() {
				t.Errorf("run: %v", h.runErr)
			}
		case <-time.After(time.Minute):
			t.Error("the worker did not stop within a minute of its cancel")
		}
		h.a.Close()
	})
	h.ingress = "http://" + listeningAddr(t, h.a.Ingress)
	h.httpAddr = listeningAddr(t, h.a.HTTP)
	h.waitFor(time.Minute, "the worker to be ready", func() bool { ok, _ := h.a.Ready(); return ok })
	return h
}

// waitFor waits for cond, and fails at once, with Run's error, if the
// worker exits meanwhile.
func (h *hostileRun) waitFor(within time.Duration, what string, cond func() bool) {
	h.t.Helper()
	err := testkit.WaitFor(h.ctx(), within, func() bool { return h.stopped() || cond() })
	h.failIfStopped(what)
	if err != nil {
		h.report()
		h.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// stopped reports whether Run returned.
func (h *hostileRun) stopped() bool {
	select {
	case <-h.exited:
		return true
	default:
		return false
	}
}

// ctx is cancelled when Run returns, so that no wait outlives the worker.
func (h *hostileRun) ctx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-h.exited
		cancel()
	}()
	return ctx
}

// failIfStopped reports what the run reached and fails the test if Run
// returned: the worker must never exit.
func (h *hostileRun) failIfStopped(what string) {
	h.t.Helper()
	if h.stopped() {
		h.report()
		h.t.Fatalf("the worker exited (Run returned) while waiting for %s: %v", what, h.runErr)
	}
}

// round produces one round: the held events the round's valid skip-gap
// commands will release, the hostile records, then valid records on every
// partition of every topic, then one event through the ingress.
func (h *hostileRun) round(r int, batch []hostile) {
	h.t.Helper()
	var recs []*kgo.Record
	for p := range int32(hpPartitions) {
		recs = append(recs, h.valid.held(r, p))
	}
	for i := range batch {
		recs = append(recs, batch[i].rec)
	}
	recs = append(recs, h.valid.round(r)...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := testkit.ProduceRecords(ctx, h.brokers, h.maxBatch, recs...); err != nil {
		h.t.Fatalf("round %d: %v", r, err)
	}
	for i := range batch {
		h.hostile = append(h.hostile, &batch[i])
		h.produced[source(batch[i].rec)] = &batch[i]
	}
	h.post(r)
	h.failIfStopped(fmt.Sprintf("round %d", r))
}

// source is a record's topic/partition/offset, as the dead-letter header
// projector-source names it.
func source(r *kgo.Record) string {
	return r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + strconv.FormatInt(r.Offset, 10)
}

// logCount counts the worker's WARN and ERROR log messages, and passes
// every record on to stderr with PROJECTOR_TEST_LOG. Loggers made With it
// count into the same map.
type logCount struct {
	msgs *messageCounts
	out  slog.Handler // nil without PROJECTOR_TEST_LOG
}

type messageCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func newLogCount() *logCount {
	c := &logCount{msgs: &messageCounts{n: map[string]int{}}}
	if os.Getenv("PROJECTOR_TEST_LOG") != "" {
		c.out = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})
	}
	return c
}

func (c *logCount) count(msg string) int {
	c.msgs.mu.Lock()
	defer c.msgs.mu.Unlock()
	return c.msgs.n[msg]
}

func (c *logCount) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn || (c.out != nil && c.out.Enabled(ctx, l))
}

func (c *logCount) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		c.msgs.mu.Lock()
		c.msgs.n[r.Message]++
		c.msgs.mu.Unlock()
	}
	if c.out != nil {
		return c.out.Handle(ctx, r)
	}
	return nil
}

func (c *logCount) WithAttrs(as []slog.Attr) slog.Handler {
	if c.out == nil {
		return c
	}
	return &logCount{msgs: c.msgs, out: c.out.WithAttrs(as)}
}

func (c *logCount) WithGroup(g string) slog.Handler {
	if c.out == nil {
		return c
	}
	return &logCount{msgs: c.msgs, out: c.out.WithGroup(g)}
}

// readyz is GET /readyz's status code.
func (h *hostileRun) readyz() int {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + h.httpAddr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
