package effect

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/projector-dev/projector/internal/core/jsonenc"
)

// KeyPrefix starts every ledger key, after the caller's prefix (the task
// prefix of the effects-topic partition in the processor's state): the key
// of an idempotency key k is prefix + KeyPrefix + k.
const KeyPrefix byte = 'e'

// MaxHistory bounds the attempts kept in an entry; older ones are dropped
// (Attempts still counts them) so that a long unknown-retry loop cannot grow
// a changelog record without bound.
const MaxHistory = 64

// formatV1 is the first byte of every encoded entry; the rest is JSON. A
// reader that meets a later format refuses it rather than guessing.
const formatV1 byte = 1

// Sentinel errors. Transition errors are *TransitionError and wrap
// ErrIllegalTransition.
//
// Every error of a ledger operation is of one of two kinds (StoreFailed):
// the ledger refused the operation – its arguments are wrong (ErrInvalid,
// ErrBadIntent), or it does not apply to the entry as it is
// (ErrIllegalTransition, ErrNotFound) – or the ledger could not read or
// write its own state (ErrStore: the KV failed; ErrCorrupt: a stored entry
// cannot be decoded). A loop that applies a record's operation
// dead-letters the record for a refusal and stops only for the second kind
// (docs/design.md#nothing-dropped-silently).
var (
	ErrNotFound          = errors.New("sideeffects: no ledger entry for key")
	ErrIllegalTransition = errors.New("sideeffects: illegal ledger transition")
	ErrCorrupt           = errors.New("sideeffects: corrupt ledger entry")
	ErrInvalid           = errors.New("sideeffects: invalid ledger operation")
	ErrStore             = errors.New("sideeffects: ledger store")
)

// StoreFailed reports whether err says that the ledger could not read or
// write its own state (ErrStore, ErrCorrupt), rather than refusing an
// operation: the one kind of ledger error that may stop a loop.
func StoreFailed(err error) bool {
	return errors.Is(err, ErrStore) || errors.Is(err, ErrCorrupt)
}

// storeError marks an error of the KV as ErrStore.
func storeError(err error) error { return fmt.Errorf("%w: %w", ErrStore, err) }

// KV is the storage the ledger works through. *state.Txn satisfies it (a
// staged Kafka transaction); sideeffectstest.MemKV is an in-memory one. Set
// may keep val.
type KV interface {
	Get(key []byte) ([]byte, bool, error)
	// Set may keep val (as state.Txn does): the caller must not modify
	// it after.
	Set(key, val []byte)
	// Scan calls fn in key order for every key with the prefix; the slices
	// are valid only during the call.
	Scan(prefix []byte, fn func(key, value []byte) error) error
}

// Entry is the ledger's record of one idempotency key.
type Entry struct {
	Key    string `json:"key"`
	Effect string `json:"effect"`
	Status Status `json:"status"`
	// Attempts counts every call started, including ones whose history
	// record was dropped (MaxHistory).
	Attempts int       `json:"attempts"`
	History  []Attempt `json:"history,omitempty"`
	// Ref is the external reference of the success (response id).
	Ref string `json:"ref,omitempty"`
	// NextAttempt is when a pending (or unknown, under onUnknown: retry)
	// entry may be tried next; zero means at once.
	NextAttempt time.Time `json:"nextAttempt,omitzero"`
	Created     time.Time `json:"created"`
	Updated     time.Time `json:"updated"`
	// Intent is the value of the first intent offered for the key; later
	// duplicates never replace it. It is the webhook body.
	Intent     json.RawMessage `json:"intent"`
	Resolution *Resolution     `json:"resolution,omitempty"`
	// TraceParent and TraceState are the first intent's trace context
	// (Intent.TraceParent), for every call of the key.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
}

// TransitionError is an illegal ledger transition.
type TransitionError struct {
	Key  string
	Op   string
	From Status
}

func (e *TransitionError) Error() string {
	return fmt.Sprintf("sideeffects: key %q: %s is not allowed from %s", e.Key, e.Op, e.From)
}

func (e *TransitionError) Unwrap() error { return ErrIllegalTransition }

// Ledger is the keyed side-effect ledger over one KV. It is cheap: make one
// per transaction (NewLedger(txn, task.Prefix())). Not safe for concurrent
// use (neither is a state.Txn).
type Ledger struct {
	kv     KV
	prefix []byte // caller prefix + KeyPrefix
}

// NewLedger returns the ledger stored in kv under prefix (which may be nil).
func NewLedger(kv KV, prefix []byte) *Ledger {
	p := append(append([]byte(nil), prefix...), KeyPrefix)
	return &Ledger{kv: kv, prefix: p}
}

// EntryKey is the KV key of an idempotency key under prefix.
func EntryKey(prefix []byte, key string) []byte {
	return append(append(append([]byte(nil), prefix...), KeyPrefix), key...)
}

func (l *Ledger) kvKey(key string) []byte {
	return append(append(make([]byte, 0, len(l.prefix)+len(key)), l.prefix...), key...)
}

// Get returns the entry of key.
func (l *Ledger) Get(key string) (Entry, bool, error) {
	v, ok, err := l.kv.Get(l.kvKey(key))
	if err != nil {
		return Entry{}, false, storeError(err)
	}
	if !ok {
		return Entry{}, false, nil
	}
	e, err := decodeEntry(v)
	return e, err == nil, err
}

func (l *Ledger) put(e *Entry) error {
	v, err := encodeEntry(e)
	if err != nil {
		return err
	}
	l.kv.Set(l.kvKey(e.Key), v)
	return nil
}

func (l *Ledger) mustGet(key string) (Entry, error) {
	e, ok, err := l.Get(key)
	if err != nil {
		return Entry{}, err
	}
	if !ok {
		return Entry{}, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	return e, nil
}

// Offer records the intent's key as pending if the ledger has never seen it.
// Otherwise it reports dup = true, returns the existing entry and writes
// nothing: status, attempts and the first intent are kept, so a redelivered
// or re-emitted intent (another projection, a replay) can never reset or
// re-run a key. A duplicate for another effect is still a duplicate: the key
// is the identity; Entry.Effect tells which effect owns it.
func (l *Ledger) Offer(in Intent, now time.Time) (e Entry, dup bool, err error) {
	if in.Key == "" || in.Effect == "" {
		return Entry{}, false, fmt.Errorf("%w: key and effect are required", ErrBadIntent)
	}
	old, ok, err := l.Get(in.Key)
	if err != nil {
		return Entry{}, false, err
	}
	if ok {
		// Nothing is written: a duplicate must not even race with the
		// executor's own read-modify-write of the entry.
		return old, true, nil
	}
	value := in.Value
	if !json.Valid(value) {
		// An Intent built by hand rather than parsed: store its JSON form.
		if value, err = jsonenc.Marshal(in); err != nil {
			return Entry{}, false, fmt.Errorf("%w: %v", ErrBadIntent, err)
		}
	}
	e = Entry{Key: in.Key, Effect: in.Effect, Status: Pending, Created: now, Updated: now,
		Intent: append(json.RawMessage(nil), value...), TraceParent: in.TraceParent, TraceState: in.TraceState}
	return e, false, l.put(&e)
}

// Start begins an attempt: pending or unknown → in-flight, Attempts+1. The
// caller must commit this durably before it calls the effect
// (docs/design.md#in-flight-before-call).
// Whether the entry is due, and whether an unknown entry may be retried, is
// the caller's policy (the sideeffects Runner's). Start records no
// deadline; StartUntil does.
func (l *Ledger) Start(key string, now time.Time) (Entry, error) {
	return l.StartUntil(key, now, time.Time{})
}

// StartUntil is Start, recording in the attempt the deadline by which its
// call will have been cancelled: what another Runner waits for before it
// retries the attempt's unknown outcome (docs/design.md#one-call-in-flight-per-key).
func (l *Ledger) StartUntil(key string, now, deadline time.Time) (Entry, error) {
	e, err := l.mustGet(key)
	if err != nil {
		return Entry{}, err
	}
	if e.Status != Pending && e.Status != Unknown {
		return e, &TransitionError{Key: key, Op: "start", From: e.Status}
	}
	e.Status = InFlight
	e.Attempts++
	e.NextAttempt = time.Time{}
	e.History = append(e.History, Attempt{N: e.Attempts, Start: now, Deadline: deadline})
	if len(e.History) > MaxHistory {
		e.History = append(e.History[:0:0], e.History[len(e.History)-MaxHistory:]...)
	}
	e.Updated = now
	return e, l.put(&e)
}

// finish closes the in-flight attempt with a, moving the entry to status.
func (l *Ledger) finish(key, op string, a Attempt, to Status, next time.Time) (Entry, error) {
	e, err := l.mustGet(key)
	if err != nil {
		return Entry{}, err
	}
	if e.Status != InFlight {
		return e, &TransitionError{Key: key, Op: op, From: e.Status}
	}
	return l.close(e, a, to, next)
}

// close writes a as the outcome of e's last attempt and moves e to status.
func (l *Ledger) close(e Entry, a Attempt, to Status, next time.Time) (Entry, error) {
	if n := len(e.History); n > 0 {
		// Start wrote the attempt's number and start time; keep them.
		cur := &e.History[n-1]
		cur.Duration, cur.Outcome, cur.StatusCode, cur.Error, cur.Ref = a.Duration, a.Outcome, a.StatusCode, a.Error, a.Ref
		if cur.Outcome == 0 {
			cur.Outcome = outcomeFor(to)
		}
		e.Updated = cur.Start.Add(cur.Duration)
	}
	e.Status = to
	e.NextAttempt = next
	if to == Succeeded {
		e.Ref = a.Ref
	}
	return e, l.put(&e)
}

func outcomeFor(s Status) Outcome {
	switch s {
	case Succeeded:
		return OutcomeSucceeded
	case Failed:
		return OutcomeFailed
	case Pending:
		return OutcomeRetryable
	}
	return OutcomeUnknown
}

// Succeed records a success: in-flight → succeeded (terminal). a.Ref is kept
// as the entry's external reference.
func (l *Ledger) Succeed(key string, a Attempt) (Entry, error) {
	return l.finish(key, "succeed", a, Succeeded, time.Time{})
}

// Fail records a terminal failure: in-flight → failed.
func (l *Ledger) Fail(key string, a Attempt) (Entry, error) {
	return l.finish(key, "fail", a, Failed, time.Time{})
}

// Retry records a retryable failure: in-flight → pending, due at next.
func (l *Ledger) Retry(key string, a Attempt, next time.Time) (Entry, error) {
	return l.finish(key, "retry", a, Pending, next)
}

// Record records the outcome of the in-flight attempt as Succeed, Fail,
// Retry or MarkUnknown would, for a caller that has decided the status
// already (the Runner): to is Succeeded, Failed, Pending (a retry, due at
// next) or Unknown (next as in MarkUnknown).
func (l *Ledger) Record(key string, a Attempt, to Status, next time.Time) (Entry, error) {
	if !to.settles() {
		return Entry{}, fmt.Errorf("%w: record %q: cannot record as %s", ErrInvalid, key, to)
	}
	return l.finish(key, "record "+to.String(), a, to, next)
}

// settles reports whether an attempt's outcome may move an entry to s.
func (s Status) settles() bool { return s == Succeeded || s == Failed || s == Pending || s == Unknown }

// MarkUnknown records an attempt whose outcome cannot be known (the request
// was sent, no answer came): in-flight → unknown. next is when a retry with
// the same key may happen under onUnknown: retry; it is ignored under park.
func (l *Ledger) MarkUnknown(key string, a Attempt, next time.Time) (Entry, error) {
	return l.finish(key, "mark unknown", a, Unknown, next)
}

// Settle records the outcome of attempt n that the Runner which made the call
// could not record (its partition was revoked while the call ran) and handed
// over (sideeffects.Calls): to is Succeeded, Failed, Pending (a retry, due at next) or
// Unknown (next as in MarkUnknown). The entry must be in-flight or unknown —
// the new owner's Recover turns the in-flight mark into unknown — with n as
// its last attempt; anything else means the ledger has moved on (another
// attempt started, an operator resolved the key) and the outcome is stale,
// so it is refused.
func (l *Ledger) Settle(key string, n int, a Attempt, to Status, next time.Time) (Entry, error) {
	if !to.settles() {
		return Entry{}, fmt.Errorf("%w: settle %q: cannot settle as %s (succeeded, failed, pending or unknown)", ErrInvalid, key, to)
	}
	e, err := l.mustGet(key)
	if err != nil {
		return Entry{}, err
	}
	last := len(e.History) - 1
	if (e.Status != InFlight && e.Status != Unknown) || e.Attempts != n || last < 0 || e.History[last].N != n {
		return e, &TransitionError{Key: key, Op: fmt.Sprintf("settle attempt %d (the last is %d)", n, e.Attempts), From: e.Status}
	}
	return l.close(e, a, to, next)
}

// Resolve settles an unknown entry by hand: unknown → succeeded or failed,
// with the note and time recorded in Resolution. Anything else is refused:
// a pending or in-flight key is still the executor's, and a terminal one is
// settled for good.
func (l *Ledger) Resolve(key string, outcome Status, note string, now time.Time) (Entry, error) {
	if outcome != Succeeded && outcome != Failed {
		return Entry{}, fmt.Errorf("%w: resolve %q: outcome must be succeeded or failed, got %s", ErrInvalid, key, outcome)
	}
	e, err := l.mustGet(key)
	if err != nil {
		return Entry{}, err
	}
	if e.Status != Unknown {
		return e, &TransitionError{Key: key, Op: "resolve", From: e.Status}
	}
	e.Status = outcome
	e.NextAttempt = time.Time{}
	e.Resolution = &Resolution{Outcome: outcome, Note: note, At: now}
	e.Updated = now
	return e, l.put(&e)
}

// Recover turns every in-flight entry into unknown and returns the entries
// it changed. Run it once, before any execution, when a ledger is taken over
// (process start, partition assignment): an in-flight entry found then was
// left by a process that stopped during or right after its call, so the
// call may have taken effect.
func (l *Ledger) Recover(now time.Time) ([]Entry, error) {
	var stuck []Entry
	// Collect first, write after: a KV need not support writes during Scan.
	err := l.Scan(func(e Entry) error {
		if e.Status == InFlight {
			stuck = append(stuck, e)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range stuck {
		e := &stuck[i]
		if n := len(e.History); n > 0 {
			e.History[n-1].Outcome = OutcomeUnknown
			e.History[n-1].Error = "recovered: the process stopped before the outcome was recorded"
		}
		e.Status = Unknown
		e.NextAttempt = time.Time{}
		e.Updated = now
		if err := l.put(e); err != nil {
			return nil, err
		}
	}
	return stuck, nil
}

// Scan calls fn for every entry, in key order. It returns fn's first error
// as it is, and marks the KV's own as ErrStore.
func (l *Ledger) Scan(fn func(Entry) error) error {
	var ferr error // decodeEntry's or fn's
	err := l.kv.Scan(l.prefix, func(_, v []byte) error {
		e, err := decodeEntry(v)
		if err == nil {
			err = fn(e)
		}
		ferr = err
		return err
	})
	switch {
	case ferr != nil:
		return ferr
	case err != nil:
		return storeError(err)
	}
	return nil
}

// List returns the entries with the given status, in key order; status 0
// lists them all. For "projector effects list --status".
func (l *Ledger) List(status Status) ([]Entry, error) {
	var out []Entry
	err := l.Scan(func(e Entry) error {
		if status == 0 || e.Status == status {
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// encodeEntry applies the ledger's bounds to e (bound) and encodes it:
// formatV1, then JSON that escapes no HTML (jsonenc.Marshal; json.Marshal
// wrote '<' as six bytes, issue 22), which decodeEntry reads as it read
// json.Marshal's.
func encodeEntry(e *Entry) ([]byte, error) {
	bound(e)
	b, err := jsonenc.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("sideeffects: encode entry %q: %w", e.Key, err)
	}
	return append([]byte{formatV1}, b...), nil
}

func decodeEntry(v []byte) (Entry, error) {
	if len(v) == 0 || v[0] != formatV1 {
		return Entry{}, fmt.Errorf("%w: unknown format", ErrCorrupt)
	}
	var e Entry
	if err := json.Unmarshal(v[1:], &e); err != nil {
		return Entry{}, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if e.Key == "" || e.Status == 0 {
		return Entry{}, fmt.Errorf("%w: missing key or status", ErrCorrupt)
	}
	return e, nil
}

// DecodeEntry decodes a stored ledger entry (a ledger changelog value), for
// tools that read the changelog topic.
func DecodeEntry(v []byte) (Entry, error) { return decodeEntry(v) }
