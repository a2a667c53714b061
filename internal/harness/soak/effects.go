package soak

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/internal/operator/ops"
	"github.com/projector-dev/projector/sideeffects"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// The soak's side effect: every applied CaseEscalated event is one webhook
// call, keyed by aggregate and version.
const (
	EffectName    = "notify"
	EffectOn      = "CaseEscalated"
	EffectsTopic  = InputTopic + ".effects"
	ExecutorGroup = Name + "-executor"
)

// EffectKey is the idempotency key the soak's rule gives an event.
func EffectKey(aggregateID string, version int64) string {
	return fmt.Sprintf("notify:%s:v%d", aggregateID, version)
}

// ExpectedEffectKeys are the keys of the intents a correct processor emits
// for recs: one per applied CaseEscalated event. Every valid first delivery
// (workload.KindEvent) is applied eventually – the reference fold's final
// version of each aggregate is its full history – while duplicates, stale
// writers, conflicts and invalid records are not.
func ExpectedEffectKeys(recs []workload.Record) (map[string]bool, error) {
	evs, err := workload.FirstDeliveries(recs)
	if err != nil {
		return nil, err
	}
	keys := map[string]bool{}
	for _, e := range evs {
		if e.Type == EffectOn {
			keys[EffectKey(e.Agg, e.Version)] = true
		}
	}
	return keys, nil
}

// receiver is a webhook receiver that honours Idempotency-Key as a real one
// does: the first request for a key applies the effect and answers 201; a
// request for a key while another request for it is in flight answers 409; a
// later request answers 200 with `Idempotent-Replayed: true`. Every request
// takes MinLatency–MaxLatency, so that kills land inside calls.
type receiver struct {
	minLatency, maxLatency time.Duration

	mu   sync.Mutex
	keys map[string]*keyStats
	rng  *rand.Rand
	// noKey counts requests without an Idempotency-Key (answered 400).
	noKey int

	srv *http.Server
	url string
}

type keyStats struct {
	requests, applied, replays, concurrent int
	inFlight                               int
}

func startReceiver(minLatency, maxLatency time.Duration, seed uint64) (*receiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &receiver{minLatency: minLatency, maxLatency: maxLatency, keys: map[string]*keyStats{},
		rng: rand.New(rand.NewPCG(seed, 0xeffec7))}
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	r.url = "http://" + ln.Addr().String() + "/notify"
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *receiver) close() { _ = r.srv.Close() }

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	_, _ = io.Copy(io.Discard, req.Body)
	key := req.Header.Get("Idempotency-Key")
	r.mu.Lock()
	if key == "" {
		r.noKey++
		r.mu.Unlock()
		http.Error(w, "Idempotency-Key required", http.StatusBadRequest)
		return
	}
	k := r.keys[key]
	if k == nil {
		k = &keyStats{}
		r.keys[key] = k
	}
	k.requests++
	if k.inFlight > 0 {
		k.concurrent++
		r.mu.Unlock()
		http.Error(w, "a request with this Idempotency-Key is in progress", http.StatusConflict)
		return
	}
	k.inFlight++
	apply := k.applied == 0
	if apply {
		k.applied++ // the effect happens now, whatever becomes of the response
	} else {
		k.replays++
	}
	d := r.minLatency
	if r.maxLatency > r.minLatency {
		d += time.Duration(r.rng.Int64N(int64(r.maxLatency - r.minLatency)))
	}
	r.mu.Unlock()
	time.Sleep(d) // sleep ok: the receiver's answer time, part of the scenario
	r.mu.Lock()
	k.inFlight--
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if !apply {
		w.Header().Set("Idempotent-Replayed", "true")
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusCreated)
	}
	fmt.Fprintf(w, `{"id":%q}`, "r-"+key)
}

// EffectsReport is the side-effect part of a soak's figure: what the
// receiver saw against the keys the reference model expects, what the
// committed effects topic holds, and what the executor's ledger says.
type EffectsReport struct {
	Keys      int // expected idempotency keys (applied CaseEscalated events)
	Requests  int // webhook requests received
	Applied   int // 201 responses: keys applied
	Replays   int // 200 Idempotent-Replayed responses: a retry after an unknown outcome
	Unknown   int // ledger attempts recorded as unknown (a kill inside a call, then Recover)
	NoKeyReqs int // requests without Idempotency-Key
	// SecondSuccess: keys answered 2xx more than once where the ledger
	// records no unknown attempt to explain the retry (each replay must
	// follow an attempt whose outcome the executor could not learn: a kill
	// inside the call). A retry after a success it had learnt is the
	// executor's fault; the receiver applying twice cannot happen (it
	// honours the key), so this is the check for "no key with two 2xx".
	SecondSuccess,
	// Unrecorded: keys with more requests than the ledger's attempts: a
	// call that no committed Start (in-flight mark) accounts for.
	Unrecorded,
	Concurrent, // requests that found another one for their key in flight (answered 409)
	NotApplied, // expected keys the receiver never applied
	UnexpectedApplied, // keys applied that the model does not expect
	IntentMissing, // expected keys with no committed intent on the effects topic
	IntentDup, // keys with more than one committed intent
	IntentUnexpected, // committed intents with a key the model does not expect
	LedgerUnsettled int // expected keys whose ledger entry is missing or not succeeded
	First []string
}

func (e EffectsReport) String() string {
	return fmt.Sprintf("effects %d keys, %d requests, %d applied, %d replays, %d unknown outcomes; second 2xx without an unknown attempt %d, calls without a committed start %d, concurrent %d, not applied %d, unexpected %d, intent missing/dup/unexpected %d/%d/%d, ledger unsettled %d",
		e.Keys, e.Requests, e.Applied, e.Replays, e.Unknown, e.SecondSuccess, e.Unrecorded, e.Concurrent, e.NotApplied, e.UnexpectedApplied+e.NoKeyReqs,
		e.IntentMissing, e.IntentDup, e.IntentUnexpected, e.LedgerUnsettled)
}

// OK reports whether every side-effect check passed.
func (e EffectsReport) OK() bool {
	return e.SecondSuccess == 0 && e.Unrecorded == 0 && e.Concurrent == 0 && e.NotApplied == 0 && e.UnexpectedApplied == 0 && e.NoKeyReqs == 0 &&
		e.IntentMissing == 0 && e.IntentDup == 0 && e.IntentUnexpected == 0 && e.LedgerUnsettled == 0
}

func (e *EffectsReport) problem(format string, args ...any) {
	if len(e.First) < 10 {
		e.First = append(e.First, fmt.Sprintf(format, args...))
	}
}

// ledgerSettled reads the executor's ledger and counts the expected keys
// whose entry has not succeeded.
func ledgerSettled(ctx context.Context, brokers []string, want map[string]bool) (unsettled, unknownAttempts int, entries []effect.Entry, err error) {
	entries, err = ops.ReadLedger(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, Name, EffectsTopic)
	if err != nil {
		return 0, 0, nil, err
	}
	ok := map[string]bool{}
	for _, e := range entries {
		if e.Status == effect.Succeeded {
			ok[e.Key] = true
		}
		unknownAttempts += countUnknown(e)
	}
	for k := range want {
		if !ok[k] {
			unsettled++
		}
	}
	return unsettled, unknownAttempts, entries, nil
}

// checkEffects compares the receiver's record, the committed effects topic
// and the ledger with the expected keys.
func checkEffects(ctx context.Context, brokers []string, rcv *receiver, want map[string]bool) (EffectsReport, error) {
	r := EffectsReport{Keys: len(want)}
	recs, err := testkit.ReadAll(ctx, brokers, EffectsTopic)
	if err != nil {
		return r, err
	}
	intents := map[string]int{}
	for _, rec := range recs {
		if isCommand(rec) {
			continue
		}
		intents[string(rec.Key)]++
	}
	for _, k := range sortedKeys(intents) {
		switch n := intents[k]; {
		case !want[k]:
			r.IntentUnexpected++
			r.problem("intent %s on %s: not expected", k, EffectsTopic)
		case n > 1:
			r.IntentDup++
			r.problem("intent %s committed %d times", k, n)
		}
	}
	unsettled, unknown, entries, err := ledgerSettled(ctx, brokers, want)
	if err != nil {
		return r, err
	}
	r.LedgerUnsettled, r.Unknown = unsettled, unknown
	if unsettled > 0 {
		status := map[string]string{}
		for _, e := range entries {
			status[e.Key] = e.Status.String()
		}
		for _, k := range sortedKeys(want) {
			if status[k] != effect.Succeeded.String() {
				r.problem("ledger %s: %q", k, status[k])
			}
		}
	}

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	r.NoKeyReqs = rcv.noKey
	for _, k := range sortedKeys(want) {
		if intents[k] == 0 {
			r.IntentMissing++
			r.problem("intent %s missing from %s", k, EffectsTopic)
		}
		if s := rcv.keys[k]; s == nil || s.applied == 0 {
			r.NotApplied++
			r.problem("key %s never applied", k)
		}
	}
	byKey := make(map[string]effect.Entry, len(entries))
	for _, e := range entries {
		byKey[e.Key] = e
	}
	for _, k := range sortedKeys(rcv.keys) {
		s := rcv.keys[k]
		e := byKey[k]
		second, unrecorded := judgeCalls(s, e)
		if second {
			r.SecondSuccess++
			r.problem("key %s answered 2xx %d times, the ledger records %d unknown attempts", k, s.applied+s.replays, countUnknown(e))
		}
		if unrecorded {
			r.Unrecorded++
			r.problem("key %s: %d requests, the ledger records %d attempts", k, s.requests, e.Attempts)
		}
		r.Requests += s.requests
		r.Applied += s.applied
		r.Replays += s.replays
		r.Concurrent += s.concurrent
		if s.concurrent > 0 {
			r.problem("key %s: %d requests while another was in flight", k, s.concurrent)
		}
		if s.applied > 0 && !want[k] {
			r.UnexpectedApplied++
			r.problem("key %s applied, not expected", k)
		}
	}
	return r, nil
}

// judgeCalls compares what the receiver saw of one key with its ledger
// entry: second is a 2xx answered again without an unknown attempt before it
// (the executor retried a success it had learnt), unrecorded a request that
// no committed attempt accounts for.
func judgeCalls(s *keyStats, e effect.Entry) (second, unrecorded bool) {
	return s.applied+s.replays > 1 && s.replays > countUnknown(e), s.requests > e.Attempts
}

func countUnknown(e effect.Entry) int {
	n := 0
	for _, a := range e.History {
		if a.Outcome == effect.OutcomeUnknown {
			n++
		}
	}
	return n
}

func isCommand(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == sideeffects.HeaderCommand {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
