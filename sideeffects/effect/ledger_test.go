package effect_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/sideeffects/effect"
	"github.com/projector-dev/projector/sideeffects/sideeffectstest"
)

// The processor's staged transaction is a KV.
var _ effect.KV = (*state.Txn)(nil)

var t0 = time.Date(2026, 6, 28, 10, 0, 0, 0, time.UTC)

func wantIllegal(t *testing.T, op string, err error) {
	t.Helper()
	var te *effect.TransitionError
	if !errors.Is(err, effect.ErrIllegalTransition) || !errors.As(err, &te) {
		t.Fatalf("%s: got %v, want an illegal transition", op, err)
	}
}

func TestLedgerTransitions(t *testing.T) {
	l := effect.NewLedger(sideeffectstest.NewMemKV(), []byte("task/"))
	in := sideeffectstest.Intent(t, "k1", "fx", "p1")

	e, dup, err := l.Offer(in, t0)
	if err != nil || dup || e.Status != effect.Pending || e.Attempts != 0 || !bytes.Equal(e.Intent, in.Value) {
		t.Fatalf("offer: %+v %v %v", e, dup, err)
	}
	// Illegal before a start.
	_, err = l.Succeed("k1", effect.Attempt{})
	wantIllegal(t, "succeed pending", err)
	_, err = l.Resolve("k1", effect.Succeeded, "", t0)
	wantIllegal(t, "resolve pending", err)

	if e, err = l.Start("k1", t0); err != nil || e.Status != effect.InFlight || e.Attempts != 1 || len(e.History) != 1 {
		t.Fatalf("start: %+v %v", e, err)
	}
	_, err = l.Start("k1", t0)
	wantIllegal(t, "start in-flight", err)
	// Retryable: back to pending, due later.
	next := t0.Add(time.Second)
	if e, err = l.Retry("k1", effect.Attempt{Duration: time.Millisecond, StatusCode: 503, Outcome: effect.OutcomeRetryable}, next); err != nil ||
		e.Status != effect.Pending || !e.NextAttempt.Equal(next) || e.History[0].StatusCode != 503 {
		t.Fatalf("retry: %+v %v", e, err)
	}
	// A duplicate offer — same projection or another — changes nothing.
	before, _, _ := l.Get("k1")
	other := sideeffectstest.Intent(t, "k1", "fx", "p2")
	if e, dup, err = l.Offer(other, t0.Add(time.Hour)); err != nil || !dup || e.Status != effect.Pending || e.Attempts != 1 {
		t.Fatalf("duplicate offer: %+v %v %v", e, dup, err)
	}
	if after, _, _ := l.Get("k1"); !bytes.Equal(mustEncode(t, &after), mustEncode(t, &before)) {
		t.Fatal("duplicate offer modified the entry")
	}

	l.Start("k1", t0)
	if e, err = l.MarkUnknown("k1", effect.Attempt{Error: "timeout"}, time.Time{}); err != nil || e.Status != effect.Unknown {
		t.Fatalf("unknown: %+v %v", e, err)
	}
	// Retry with the same key from unknown.
	if e, err = l.Start("k1", t0); err != nil || e.Attempts != 3 {
		t.Fatalf("start from unknown: %+v %v", e, err)
	}
	if e, err = l.Succeed("k1", effect.Attempt{StatusCode: 200, Ref: "R-1"}); err != nil || e.Status != effect.Succeeded || e.Ref != "R-1" {
		t.Fatalf("succeed: %+v %v", e, err)
	}
	if got := [3]effect.Outcome{e.History[0].Outcome, e.History[1].Outcome, e.History[2].Outcome}; got != [3]effect.Outcome{effect.OutcomeRetryable, effect.OutcomeUnknown, effect.OutcomeSucceeded} {
		t.Fatalf("history outcomes %v", got)
	}
	// Nothing leaves succeeded.
	_, err = l.Start("k1", t0)
	wantIllegal(t, "start succeeded", err)
	_, err = l.Succeed("k1", effect.Attempt{})
	wantIllegal(t, "succeed succeeded", err)
	_, err = l.Fail("k1", effect.Attempt{})
	wantIllegal(t, "fail succeeded", err)
	_, err = l.Retry("k1", effect.Attempt{}, t0)
	wantIllegal(t, "retry succeeded", err)
	_, err = l.MarkUnknown("k1", effect.Attempt{}, t0)
	wantIllegal(t, "unknown succeeded", err)
	_, err = l.Resolve("k1", effect.Failed, "", t0)
	wantIllegal(t, "resolve succeeded", err)
	if _, dup, _ := l.Offer(in, t0); !dup {
		t.Fatal("offer after success is not a duplicate")
	}
	if e, _, _ := l.Get("k1"); e.Status != effect.Succeeded || e.Attempts != 3 {
		t.Fatalf("after everything: %+v", e)
	}

	// Failed is terminal too.
	l.Offer(sideeffectstest.Intent(t, "k2", "fx", "p1"), t0)
	l.Start("k2", t0)
	if e, err = l.Fail("k2", effect.Attempt{StatusCode: 400}); err != nil || e.Status != effect.Failed {
		t.Fatalf("fail: %+v %v", e, err)
	}
	_, err = l.Start("k2", t0)
	wantIllegal(t, "start failed", err)

	// Resolve: only from unknown, only to a terminal outcome.
	l.Offer(sideeffectstest.Intent(t, "k3", "fx", "p1"), t0)
	l.Start("k3", t0)
	l.MarkUnknown("k3", effect.Attempt{}, time.Time{})
	if _, err = l.Resolve("k3", effect.Pending, "", t0); err == nil {
		t.Fatal("resolve to pending accepted")
	}
	if e, err = l.Resolve("k3", effect.Succeeded, "checked with the mail provider", t0); err != nil || e.Status != effect.Succeeded ||
		e.Resolution == nil || e.Resolution.Note != "checked with the mail provider" {
		t.Fatalf("resolve: %+v %v", e, err)
	}

	if _, err := l.Start("nope", t0); !errors.Is(err, effect.ErrNotFound) {
		t.Fatalf("start of a missing key: %v", err)
	}
	if _, _, err := l.Offer(effect.Intent{Key: "x"}, t0); !errors.Is(err, effect.ErrBadIntent) {
		t.Fatalf("offer without effect: %v", err)
	}
}

// Settle records a handed-over outcome of attempt n only while the entry
// waits for it: in-flight or unknown (after Recover) with n as its last
// attempt. Anything else is stale and refused.
func TestLedgerSettle(t *testing.T) {
	l := effect.NewLedger(sideeffectstest.NewMemKV(), nil)
	for _, k := range []string{"flight", "recovered", "moved-on", "resolved", "pending"} {
		l.Offer(sideeffectstest.Intent(t, k, "fx", "p"), t0)
	}
	for _, k := range []string{"flight", "recovered", "moved-on", "resolved"} {
		l.Start(k, t0)
	}
	l.Recover(t0.Add(time.Second)) // all but "pending" are unknown at attempt 1 now
	l.Start("flight", t0.Add(2*time.Second))
	l.Start("moved-on", t0.Add(2*time.Second))
	l.Resolve("resolved", effect.Failed, "by hand", t0)

	ok := effect.Attempt{Duration: time.Second, Outcome: effect.OutcomeSucceeded, StatusCode: 201, Ref: "R"}
	// In-flight at attempt 2.
	e, err := l.Settle("flight", 2, ok, effect.Succeeded, time.Time{})
	if err != nil || e.Status != effect.Succeeded || e.Ref != "R" || e.Attempts != 2 || e.History[1].StatusCode != 201 {
		t.Fatalf("settle in-flight: %+v %v", e, err)
	}
	// Unknown at attempt 1 (Recover's note is replaced by the real outcome).
	e, err = l.Settle("recovered", 1, ok, effect.Succeeded, time.Time{})
	if err != nil || e.Status != effect.Succeeded || e.History[0].Outcome != effect.OutcomeSucceeded || e.History[0].Error != "" {
		t.Fatalf("settle unknown: %+v %v", e, err)
	}
	// Other outcomes, like finish's.
	l.Offer(sideeffectstest.Intent(t, "retry", "fx", "p"), t0)
	l.Start("retry", t0)
	next := t0.Add(time.Minute)
	if e, err = l.Settle("retry", 1, effect.Attempt{StatusCode: 503}, effect.Pending, next); err != nil ||
		e.Status != effect.Pending || !e.NextAttempt.Equal(next) || e.History[0].Outcome != effect.OutcomeRetryable {
		t.Fatalf("settle as retry: %+v %v", e, err)
	}

	// Refused: another attempt started since, a settled key, a key never
	// started, an attempt that is not the last, a status that is no outcome.
	_, err = l.Settle("moved-on", 1, ok, effect.Succeeded, time.Time{})
	wantIllegal(t, "settle an earlier attempt", err)
	_, err = l.Settle("flight", 2, ok, effect.Failed, time.Time{})
	wantIllegal(t, "settle succeeded", err)
	_, err = l.Settle("resolved", 1, ok, effect.Succeeded, time.Time{})
	wantIllegal(t, "settle resolved", err)
	_, err = l.Settle("pending", 0, ok, effect.Succeeded, time.Time{})
	wantIllegal(t, "settle pending", err)
	_, err = l.Settle("moved-on", 3, ok, effect.Succeeded, time.Time{})
	wantIllegal(t, "settle a future attempt", err)
	if _, err = l.Settle("moved-on", 2, ok, effect.InFlight, time.Time{}); !errors.Is(err, effect.ErrInvalid) {
		t.Fatalf("settle as in-flight: %v, want ErrInvalid", err)
	}
	if _, err = l.Settle("nope", 1, ok, effect.Succeeded, time.Time{}); !errors.Is(err, effect.ErrNotFound) {
		t.Fatalf("settle a missing key: %v", err)
	}
	if e, _, _ := l.Get("moved-on"); e.Status != effect.InFlight || e.Attempts != 2 {
		t.Fatalf("refused settles changed the entry: %+v", e)
	}
}

func mustEncode(t *testing.T, e *effect.Entry) []byte {
	t.Helper()
	b, err := effect.EncodeEntry(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLedgerRecoverAndList(t *testing.T) {
	kv := sideeffectstest.NewMemKV()
	l := effect.NewLedger(kv, nil)
	for i, st := range []effect.Status{effect.Pending, effect.InFlight, effect.InFlight, effect.Succeeded, effect.Unknown} {
		key := fmt.Sprintf("k%d", i)
		l.Offer(sideeffectstest.Intent(t, key, "fx", "p"), t0)
		switch st {
		case effect.InFlight:
			l.Start(key, t0)
		case effect.Succeeded:
			l.Start(key, t0)
			l.Succeed(key, effect.Attempt{})
		case effect.Unknown:
			l.Start(key, t0)
			l.MarkUnknown(key, effect.Attempt{}, time.Time{})
		}
	}
	// Another ledger's keys (another prefix) are not this ledger's.
	effect.NewLedger(kv, []byte("other")).Offer(sideeffectstest.Intent(t, "z", "fx", "p"), t0)

	got, err := l.Recover(t0.Add(time.Minute))
	if err != nil || len(got) != 2 || got[0].Key != "k1" || got[1].Key != "k2" {
		t.Fatalf("recover: %v %v", got, err)
	}
	for _, e := range got {
		if e.Status != effect.Unknown || e.History[0].Outcome != effect.OutcomeUnknown || e.Attempts != 1 {
			t.Fatalf("recovered entry %+v", e)
		}
	}
	count := func(s effect.Status) int {
		es, err := l.List(s)
		if err != nil {
			t.Fatal(err)
		}
		return len(es)
	}
	if count(effect.InFlight) != 0 || count(effect.Unknown) != 3 || count(effect.Pending) != 1 || count(effect.Succeeded) != 1 || count(0) != 5 {
		t.Fatalf("list: in-flight %d unknown %d pending %d succeeded %d all %d",
			count(effect.InFlight), count(effect.Unknown), count(effect.Pending), count(effect.Succeeded), count(0))
	}
	if again, _ := l.Recover(t0); len(again) != 0 {
		t.Fatal("second recover changed entries")
	}
	if _, err := effect.ParseStatus("in-flight"); err != nil {
		t.Fatal(err)
	}
	if _, err := effect.ParseStatus("resolved"); err == nil {
		t.Fatal("ParseStatus accepted nonsense")
	}
}

func TestLedgerEncoding(t *testing.T) {
	kv := sideeffectstest.NewMemKV()
	l := effect.NewLedger(kv, []byte("p"))
	in := sideeffectstest.Intent(t, "key:with:colons", "fx", "p")
	l.Offer(in, t0)
	raw, ok, _ := kv.Get(effect.EntryKey([]byte("p"), "key:with:colons"))
	if !ok || raw[0] != effect.FormatV1 || !bytes.HasPrefix(effect.EntryKey([]byte("p"), "k"), []byte{'p', effect.KeyPrefix}) {
		t.Fatalf("stored %q", raw)
	}
	// An unknown format version or garbage is refused, not guessed.
	for _, bad := range [][]byte{{}, {2, '{', '}'}, append([]byte{effect.FormatV1}, "{"...), append([]byte{effect.FormatV1}, `{"key":"k"}`...)} {
		kv.Set(effect.EntryKey([]byte("p"), "bad"), bad)
		if _, _, err := l.Get("bad"); !errors.Is(err, effect.ErrCorrupt) {
			t.Errorf("decode %q: %v", bad, err)
		}
	}
	// History is bounded; Attempts is not.
	l2 := effect.NewLedger(sideeffectstest.NewMemKV(), nil)
	l2.Offer(in, t0)
	for range effect.MaxHistory + 10 {
		l2.Start(in.Key, t0)
		l2.Retry(in.Key, effect.Attempt{}, t0)
	}
	e, _, _ := l2.Get(in.Key)
	if e.Attempts != effect.MaxHistory+10 || len(e.History) != effect.MaxHistory || e.History[len(e.History)-1].N != effect.MaxHistory+10 {
		t.Fatalf("attempts %d history %d", e.Attempts, len(e.History))
	}
}

// The ledger over the processor's real staged transaction: writes become
// visible only through Commit, and an uncommitted transaction leaves nothing.
func TestLedgerOverStateTxn(t *testing.T) {
	st, err := state.Open("/ledger", state.Options{FS: vfs.NewMem(), CacheBytes: 1 << 20, MemTableBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	prefix := state.Task{Topic: "fx", Partition: 3}.Prefix()

	tx := st.NewTxn()
	l := effect.NewLedger(tx, prefix)
	l.Offer(sideeffectstest.Intent(t, "a", "fx", "p"), t0)
	l.Start("a", t0) // read-your-writes inside the txn
	if e, _, _ := l.Get("a"); e.Status != effect.InFlight {
		t.Fatalf("staged status %v", e.Status)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	aborted := st.NewTxn()
	effect.NewLedger(aborted, prefix).Succeed("a", effect.Attempt{}) // staged, never committed

	l = effect.NewLedger(st.NewTxn(), prefix)
	if e, ok, err := l.Get("a"); err != nil || !ok || e.Status != effect.InFlight {
		t.Fatalf("committed entry %+v %v %v", e, ok, err)
	}
	if got, err := l.Recover(t0); err != nil || len(got) != 1 {
		t.Fatalf("recover over state.Txn: %v %v", got, err)
	}
	if es, _ := l.List(effect.Unknown); len(es) != 1 {
		t.Fatalf("list unknown %v", es)
	}
}

// failingKV is a KV whose reads fail, as Pebble's may.
type failingKV struct {
	effect.KV
	err error
}

func (f failingKV) Get([]byte) ([]byte, bool, error)                 { return nil, false, f.err }
func (f failingKV) Scan([]byte, func(key, value []byte) error) error { return f.err }

// Every ledger error is either a refusal (the arguments are wrong, or the
// operation does not apply to the entry as it is) or a failure of the
// ledger's own state (StoreFailed): a loop applying a record's operation
// dead-letters the record for the first and stops only for the second.
func TestLedgerErrorKinds(t *testing.T) {
	boom := errors.New("pebble: i/o error")
	broken := effect.NewLedger(failingKV{KV: sideeffectstest.NewMemKV(), err: boom}, nil)
	kv := sideeffectstest.NewMemKV()
	l := effect.NewLedger(kv, nil)
	l.Offer(sideeffectstest.Intent(t, "k", "fx", "p"), t0)
	kv.Set(effect.EntryKey(nil, "garbled"), []byte{effect.FormatV1, '{'})
	_, _, offerErr := broken.Offer(sideeffectstest.Intent(t, "k", "fx", "p"), t0)
	_, listErr := broken.List(0)
	_, recoverErr := broken.Recover(t0)
	_, corruptErr := l.Start("garbled", t0)
	_, scanCorrupt := l.List(0)
	fnErr := errors.New("stop here")
	clean := effect.NewLedger(sideeffectstest.NewMemKV(), nil)
	clean.Offer(sideeffectstest.Intent(t, "k", "fx", "p"), t0)
	for _, tc := range []struct {
		name  string
		err   error
		store bool
		is    error
	}{
		{"read fails (Offer)", offerErr, true, effect.ErrStore},
		{"scan fails (List)", listErr, true, effect.ErrStore},
		{"scan fails (Recover)", recoverErr, true, effect.ErrStore},
		{"stored entry corrupt (Start)", corruptErr, true, effect.ErrCorrupt},
		{"stored entry corrupt (List)", scanCorrupt, true, effect.ErrCorrupt},
		{"scan callback's own error", clean.Scan(func(effect.Entry) error { return fnErr }), false, fnErr},
		{"settle as in-flight", second(l.Settle("k", 1, effect.Attempt{}, effect.InFlight, time.Time{})), false, effect.ErrInvalid},
		{"record as in-flight", second(l.Record("k", effect.Attempt{}, effect.InFlight, time.Time{})), false, effect.ErrInvalid},
		{"resolve as pending", second(l.Resolve("k", effect.Pending, "", t0)), false, effect.ErrInvalid},
		{"intent without effect", third(l.Offer(effect.Intent{Key: "x"}, t0)), false, effect.ErrBadIntent},
		{"no such key", second(l.Start("nope", t0)), false, effect.ErrNotFound},
		{"not from this status", second(l.Resolve("k", effect.Failed, "", t0)), false, effect.ErrIllegalTransition},
	} {
		if !errors.Is(tc.err, tc.is) || effect.StoreFailed(tc.err) != tc.store {
			t.Errorf("%s: %v: want %v, StoreFailed %v", tc.name, tc.err, tc.is, tc.store)
		}
	}
	if !errors.Is(offerErr, boom) {
		t.Errorf("the store's error is lost: %v", offerErr)
	}
}

func second[T any](_ T, err error) error { return err }

func third[T, U any](_ T, _ U, err error) error { return err }

// StartUntil records the attempt's deadline; an entry stored before there
// was one (no "deadline" member) decodes with a zero deadline, and a zero
// deadline is not stored.
func TestLedgerAttemptDeadline(t *testing.T) {
	kv := sideeffectstest.NewMemKV()
	l := effect.NewLedger(kv, nil)
	l.Offer(sideeffectstest.Intent(t, "k", "fx", "p"), t0)
	deadline := t0.Add(30 * time.Second)
	e, err := l.StartUntil("k", t0, deadline)
	if err != nil || !e.History[0].Deadline.Equal(deadline) {
		t.Fatalf("start: %+v %v", e.History, err)
	}
	if e, err = l.Record("k", effect.Attempt{StatusCode: 503}, effect.Pending, t0); err != nil || !e.History[0].Deadline.Equal(deadline) {
		t.Fatalf("the outcome lost the deadline: %+v %v", e.History, err)
	}
	old := `{"key":"old","effect":"fx","status":"unknown","attempts":1,"history":[{"n":1,"start":"2026-06-28T10:00:00Z","outcome":"unknown"}],"created":"2026-06-28T10:00:00Z","updated":"2026-06-28T10:00:00Z","intent":{}}`
	kv.Set(effect.EntryKey(nil, "old"), append([]byte{effect.FormatV1}, old...))
	if e, ok, err := l.Get("old"); err != nil || !ok || !e.History[0].Deadline.IsZero() || !e.History[0].Start.Equal(t0) {
		t.Fatalf("old entry: %+v %v %v", e, ok, err)
	}
	l.Start("old", t0)
	raw, _, _ := kv.Get(effect.EntryKey(nil, "old"))
	if bytes.Contains(raw, []byte(`"deadline"`)) {
		t.Fatalf("a zero deadline is stored: %s", raw)
	}
}

// Withdraw takes back attempt n, named by its number and start, while the
// entry is still at it (in-flight, or unknown after Recover): the key is
// pending again, the attempt gone from the history and not counted. A
// withdrawal of another attempt – an older one, one whose number the next
// attempt took again, a settled key – is refused.
func TestLedgerWithdraw(t *testing.T) {
	l := effect.NewLedger(sideeffectstest.NewMemKV(), nil)
	l.Offer(sideeffectstest.Intent(t, "k", "fx", "p"), t0)
	l.Start("k", t0)
	l.Record("k", effect.Attempt{StatusCode: 503}, effect.Pending, t0)
	s2 := t0.Add(time.Second)
	l.StartUntil("k", s2, s2.Add(time.Minute))
	next := t0.Add(time.Hour)
	_, err := l.Withdraw("k", 2, t0, next, s2)
	wantIllegal(t, "withdraw with another start", err)
	_, err = l.Withdraw("k", 1, t0, next, s2)
	wantIllegal(t, "withdraw an earlier attempt", err)
	e, err := l.Withdraw("k", 2, s2, next, s2)
	if err != nil || e.Status != effect.Pending || e.Attempts != 1 || len(e.History) != 1 || e.History[0].StatusCode != 503 || !e.NextAttempt.Equal(next) {
		t.Fatalf("withdraw in-flight: %+v %v", e, err)
	}
	_, err = l.Withdraw("k", 2, s2, next, s2)
	wantIllegal(t, "withdraw twice", err)

	// The next attempt is number 2 again; the old withdrawal does not
	// apply to it, its own does, also once Recover made it unknown.
	s3 := t0.Add(2 * time.Second)
	l.Start("k", s3)
	_, err = l.Withdraw("k", 2, s2, next, s3)
	wantIllegal(t, "withdraw the attempt whose number was taken again", err)
	l.Recover(s3)
	if e, err = l.Withdraw("k", 2, s3, time.Time{}, s3); err != nil || e.Status != effect.Pending || e.Attempts != 1 {
		t.Fatalf("withdraw unknown: %+v %v", e, err)
	}
	l.Start("k", s3)
	l.Succeed("k", effect.Attempt{})
	_, err = l.Withdraw("k", 2, s3, next, s3)
	wantIllegal(t, "withdraw a succeeded key", err)
	if _, err := l.Withdraw("nope", 1, t0, next, t0); !errors.Is(err, effect.ErrNotFound) {
		t.Fatalf("withdraw a missing key: %v", err)
	}
}
