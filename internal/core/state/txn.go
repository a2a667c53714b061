package state

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"
	"unsafe"
)

// Txn stages the writes of one Kafka transaction. It is owned by one goroutine.
// Writes to the same key collapse to the last one, so the changelog carries one
// record per key per transaction, not one per event.
//
// The txn keeps the keys and values it is given, without a copy (a key per
// event would otherwise be copied into a string of its own): a caller hands
// over buffers it will not modify again. Test binaries check the keys at
// every write (checkKeptKeys).
//
// A Txn may read through a base Txn before the store (NewTxnOver): the staged
// writes of a previous transaction whose Pebble write is still in flight.
// Reads never change a base, so several Txns may read one base concurrently
// as long as nobody writes it.
type Txn struct {
	s       *Store
	base    *Txn
	writes  map[string]staged
	offsets map[Task]int64
	// ranges are local range deletions ([start, end) pairs), written
	// before the staged writes (DeleteRangeLocal).
	ranges [][2][]byte
	// kept holds, in test binaries only (checkKeptKeys), every staged key
	// with a copy of its bytes as they were handed over.
	kept []keptKey
}

// keptKey is a staged key (aliasing the caller's buffer) and what it read
// when it was staged.
type keptKey struct{ key, was string }

type staged struct {
	val []byte // nil: deleted
	// log, if not nil, is what the changelog carries instead of val (a
	// compact Pebble value stands for it); local writes never reach the
	// changelog (state a changelog record elsewhere restores).
	log   []byte
	local bool
}

// NewTxn starts an empty staging overlay over the store.
func (s *Store) NewTxn() *Txn {
	return &Txn{s: s, writes: make(map[string]staged), offsets: make(map[Task]int64)}
}

// NewTxnOver starts an empty staging overlay that reads through base (nil:
// the store) before the store, with room for at least hint staged keys (the
// caller's count from its previous transaction) and at least base's:
// consecutive transactions of a task stage similar numbers of keys, and
// growing the map step by step costs more than the staging itself.
func (s *Store) NewTxnOver(base *Txn, hint int) *Txn {
	if base != nil {
		hint = max(hint, len(base.writes))
	}
	return &Txn{s: s, base: base, writes: make(map[string]staged, hint), offsets: make(map[Task]int64)}
}

// Detach stops t reading through its base: call it once the base's writes are
// in Pebble (then the two views are equal) so that chains stay short.
func (t *Txn) Detach() { t.base = nil }

// Get reads key, staged writes first (docs/design.md#read-your-writes), then
// the bases'. The returned slice must not be modified.
func (t *Txn) Get(key []byte) ([]byte, bool, error) {
	for l := t; l != nil; l = l.base {
		if w, ok := l.writes[string(key)]; ok {
			return w.val, w.val != nil, nil
		}
	}
	return t.s.Get(key)
}

// staged reports the nearest staged write of key along the chain.
func (t *Txn) staged(key string) (staged, bool) {
	for l := t; l != nil; l = l.base {
		if w, ok := l.writes[key]; ok {
			return w, true
		}
	}
	return staged{}, false
}

// Set stages key=val. The txn keeps both; the caller must not modify them
// after.
func (t *Txn) Set(key, val []byte) {
	if val == nil {
		val = []byte{}
	}
	t.writes[t.keep(key)] = staged{val: val}
}

// Delete stages the deletion of key (kept, as Set keeps it).
func (t *Txn) Delete(key []byte) { t.writes[t.keep(key)] = staged{} }

// SetLocal stages key=val for Pebble only: no changelog record. For state
// that another key's changelog record restores (dedup entries, restored from
// their transaction's segment record). Kept, as Set keeps them.
func (t *Txn) SetLocal(key, val []byte) {
	if val == nil {
		val = []byte{}
	}
	t.writes[t.keep(key)] = staged{val: val, local: true}
}

// DeleteLocal stages the deletion of a key written with SetLocal (kept).
func (t *Txn) DeleteLocal(key []byte) { t.writes[t.keep(key)] = staged{local: true} }

// DeleteRangeLocal stages the deletion of every key in [start, end) for
// Pebble only, as one range tombstone: for local state that nobody reads
// any more (dedup entries past their retention, deleted by the time range
// they fall in). The txn's reads (Get, Scan) and those of a Txn over it do
// not see it before it is written; it is written before the staged writes,
// so a key the txn sets inside the range survives. Kept, as Set keeps them.
func (t *Txn) DeleteRangeLocal(start, end []byte) {
	t.ranges = append(t.ranges, [2][]byte{start, end})
}

// SetLogged stages key=val in Pebble and key=log in the changelog: the
// changelog record carries what a restore expands (see eos.Config.Restore),
// Pebble keeps a compact marker. Kept, as Set keeps them.
func (t *Txn) SetLogged(key, val, log []byte) {
	if val == nil {
		val = []byte{}
	}
	if log == nil {
		log = []byte{}
	}
	t.writes[t.keep(key)] = staged{val: val, log: log}
}

// ownedKey is a kept key as the string the txn indexes it by, without a
// copy.
func ownedKey(key []byte) string { return unsafe.String(unsafe.SliceData(key), len(key)) }

// checkKeptKeys makes write verify, in test binaries, that no staged key
// changed after it was handed over: a caller that reuses a key's buffer
// would otherwise write the wrong key to Pebble and the changelog, and
// leave the staged map unable to find it, silently. The check keeps a copy
// of every key, so the builds we ship skip it; every package's tests that
// commit through a Txn run it.
var checkKeptKeys = testing.Testing()

// keep is key as the string the txn indexes it by (ownedKey); in test
// binaries it also remembers what key reads now, for verifyKeptKeys.
func (t *Txn) keep(key []byte) string {
	k := ownedKey(key)
	if checkKeptKeys {
		t.kept = append(t.kept, keptKey{key: k, was: string(key)})
	}
	return k
}

// verifyKeptKeys panics, naming the key as it now reads, if a staged key's
// bytes differ from those it was handed over with. (Asking the map whether
// the key still finds its entry, as this did first, misses a change whose
// new bytes happen to find the same slot: 6 of 2,000 runs of
// TestKeptKeyChangedIsCaught failed so.)
func (t *Txn) verifyKeptKeys() {
	for _, k := range t.kept {
		if k.key != k.was {
			panic(fmt.Sprintf("state: a staged key changed after it was handed to the txn (it now reads %q): "+
				"a Txn keeps the keys it is given, so the caller must not modify them", k.key))
		}
	}
}

// Len is the number of distinct keys staged (an upper bound of the
// changelog records Each yields).
func (t *Txn) Len() int { return len(t.writes) }

// Each calls fn for every staged write bound for the changelog, with the
// value the changelog carries; val is nil for a deletion. Local writes are
// skipped.
func (t *Txn) Each(fn func(key string, val []byte)) {
	for k, w := range t.writes {
		switch {
		case w.local:
		case w.log != nil:
			fn(k, w.log)
		default:
			fn(k, w.val)
		}
	}
}

// SetChangelogOffset records that, once this txn commits, the task's state
// reflects its changelog up to (not including) next.
func (t *Txn) SetChangelogOffset(task Task, next int64) {
	if cur, ok := t.offsets[task]; !ok || next > cur {
		t.offsets[task] = next
	}
}

// Commit writes the staged state and changelog offsets to Pebble in one synced
// batch and empties the txn. Call it only after the Kafka transaction
// committed (docs/design.md#behind-kafka), and from one goroutine at a time
// per store: the background-flush bookkeeping (maybeFlush) is the
// committer's alone. Store.Restore may run beside it (a standby replica).
func (t *Txn) Commit() error {
	if err := t.write(); err != nil {
		return err
	}
	t.Finish()
	return nil
}

// WriteAll writes txns that own disjoint keys – one per task – each in its
// own synced batch, in order, stopping at the first failure. Every batch
// carries its task's changelog offset, so docs/design.md#atomic-task-commit
// holds per task, the unit a restore works in: after a crash between two of
// the batches, each task restores from the offset its own batch recorded.
// (Sequential on purpose: a failed WAL write leaves Pebble unusable, and a
// concurrent commit would then run into Pebble's own panics.)
//
// WriteAll only reads the txns, so other goroutines may keep reading through
// them (NewTxnOver) meanwhile; Finish them afterwards, on the owner's
// goroutine.
func (s *Store) WriteAll(txns []*Txn) error {
	for _, t := range txns {
		if err := t.write(); err != nil {
			return err
		}
	}
	return nil
}

// committedWrite is one write on its way to Pebble; cached says whether the
// store keeps fast paths for its key (Options.Cached), and then hash is its
// keyHash.
type committedWrite struct {
	key string
	val []byte
	// cached: the key filter holds the key (Options.Cached); valued: the
	// value cache takes its value too (not Options.FilterOnly).
	cached, valued bool
	hash           uint64
}

func (s *Store) committedWrite(key string, val []byte) committedWrite {
	w := committedWrite{key: key, val: val}
	if kb := unsafe.Slice(unsafe.StringData(key), len(key)); s.isCached(kb) {
		w.cached, w.valued, w.hash = true, s.valueCached(kb), keyHash(kb)
	}
	return w
}

// write puts the staged state and offsets into Pebble, synced.
func (t *Txn) write() (err error) {
	if err := t.s.writable(); err != nil {
		return err
	}
	if len(t.writes) == 0 && len(t.offsets) == 0 && len(t.ranges) == 0 {
		return nil
	}
	if checkKeptKeys {
		t.verifyKeptKeys()
	}
	defer t.s.contain(&err)
	// In key order: the memtable's skiplist inserter reuses its last
	// position, so sorted inserts (dedup ids are random hashes) cost a
	// fraction of scattered ones.
	// The changelog offsets go in the same batch
	// (docs/design.md#atomic-task-commit) and through the same filter and
	// cache updates as the state.
	ws := make([]committedWrite, 0, len(t.writes)+len(t.offsets))
	for k, w := range t.writes {
		ws = append(ws, t.s.committedWrite(k, w.val))
	}
	matched := t.s.now() // Pebble matches each task's changelog up to next
	for task, next := range t.offsets {
		ws = append(ws, t.s.committedWrite(string(offsetKey(task)), offsetValue(next, matched)))
	}
	size := 0
	for _, w := range ws {
		size += len(w.key) + len(w.val) + 16
	}
	for _, r := range t.ranges {
		size += len(r[0]) + len(r[1]) + 16
	}
	// Indices, not the 56-byte writes. The state writes share the task's
	// prefix, the offsets' keys do not: sorted apart, the radix sort
	// starts past the prefix.
	order := keyOrder(ws[:len(t.writes)])
	for i := len(t.writes); i < len(ws); i++ {
		order = insertInOrder(ws, order, int32(i))
	}
	b := t.s.db.NewBatchWithSize(size)
	defer b.Close()
	// The range deletions first: a key staged inside one is written after
	// it, so it survives (a batch's entries apply in order).
	for _, r := range t.ranges {
		if err := b.DeleteRange(r[0], r[1], nil); err != nil {
			return fmt.Errorf("state: commit: %w", err)
		}
	}
	for _, i := range order {
		w := &ws[i]
		kb := unsafe.Slice(unsafe.StringData(w.key), len(w.key)) // Batch.Set copies
		var err error
		if w.val == nil {
			err = b.Delete(kb, nil)
		} else {
			if w.cached {
				t.s.keys.add(w.hash) // before the batch is visible
			}
			err = b.Set(kb, w.val, nil)
		}
		if err != nil {
			return fmt.Errorf("state: commit: %w", err)
		}
	}
	if err := b.Commit(t.s.commitOpts); err != nil {
		// Unknown what landed, and Pebble's WAL is suspect: refuse
		// further writes (a later one could run into Pebble's panics on
		// a failed log); the loop stops and a restart restores.
		t.s.cache.clear()
		t.s.broken.Store(true)
		return fmt.Errorf("%w: state: commit: %w", ErrFatal, err)
	}
	t.s.cache.committed(ws, t.s.cached != nil)
	for _, r := range t.ranges {
		t.s.forgetRange(r[0])
	}
	t.s.maybeFlush(matched)
	return nil
}

// maybeFlush starts a flush in the background when the store has no WAL and
// its last one is Options.FlushEvery ago (now is the commit's time): the
// commits since are on disk once it ends. A flush that cannot start is left
// to the next commit (Pebble flushes a full memtable anyway).
func (s *Store) maybeFlush(now time.Time) {
	if s.flushEvery == 0 || now.Sub(s.lastFlush) < s.flushEvery {
		return
	}
	if done, err := s.db.AsyncFlush(); err == nil {
		s.lastFlush, s.flushDone = now, done
	}
}

// Finish empties a written txn (nothing may read through it any more).
func (t *Txn) Finish() { t.writes, t.offsets, t.ranges, t.kept = nil, nil, nil, nil }

// Scan calls fn, in key order, for every key with prefix as this txn sees it:
// Pebble overlaid with the staged writes. It is meant for rare, bounded work
// (draining or expiring one aggregate's held events), not the per-event path.
func (t *Txn) Scan(prefix []byte, fn func(key, value []byte) error) error {
	return t.ScanFrom(prefix, prefix, fn)
}

// ScanFrom is Scan restricted to keys ≥ from (a cursor within the prefix).
func (t *Txn) ScanFrom(prefix, from []byte, fn func(key, value []byte) error) error {
	var staged []string
	for l := t; l != nil; l = l.base {
		for k := range l.writes {
			if len(k) >= len(prefix) && k[:len(prefix)] == string(prefix) && k >= string(from) {
				staged = append(staged, k)
			}
		}
	}
	sort.Strings(staged)
	staged = slices.Compact(staged)
	emitStaged := func(upTo string, inclusive bool) error {
		for len(staged) > 0 && (staged[0] < upTo || (inclusive && staged[0] == upTo) || upTo == "") {
			k := staged[0]
			staged = staged[1:]
			if w, _ := t.staged(k); w.val != nil {
				if err := fn([]byte(k), w.val); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err := t.s.scanFrom(prefix, from, func(key, value []byte) error {
		if err := emitStaged(string(key), false); err != nil {
			return err
		}
		if _, ok := t.staged(string(key)); ok {
			return nil // the staged write (or deletion) wins
		}
		return fn(key, value)
	})
	if err != nil {
		return err
	}
	return emitStaged("", true)
}
