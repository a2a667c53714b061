// Package state is projector's local state store: a Pebble database that is a
// cache of the changelog topics, and the per-transaction staging overlay that
// keeps it from ever getting ahead of Kafka.
//
// Invariants (named in docs/design.md#invariants):
//
//   - behind-kafka: Pebble is never ahead of Kafka. A Txn stages every write
//     in memory; nothing reaches Pebble until Commit (or Store.WriteAll),
//     which the processor calls only after the Kafka transaction carrying
//     the same writes (as changelog records) has committed. A discarded Txn
//     leaves no trace.
//   - read-your-writes: Txn.Get consults the staged overlay before Pebble, so
//     two events of one aggregate in one transaction see each other.
//   - atomic-task-commit: every commit is atomic per task: a task's state
//     writes and the changelog offset they reflect land in one batch, so
//     after a crash Pebble says exactly which changelog offset each task
//     restores from (a transaction spanning tasks is several batches; see
//     docs/decisions/004). With a WAL every commit is synced; without one
//     (Options.NoWAL, docs/decisions/016) a crash leaves a prefix of the
//     commits, each batch whole, with its offset.
//
// Key layout. Keys owned by an input partition (a "task") start with the task
// prefix: 't', uint16 topic length, topic, uint32 partition. What follows the
// prefix is the changelog key; the processor produces it, with the value, to the
// task's changelog partition. Keys starting with 'o' hold, per task, the next
// changelog offset to restore from and the time the task's state last matched
// the changelog (ChangelogPosition); they are local and never produced.
//
// Most writes reach the changelog as they reach Pebble, one record per key.
// Two kinds depart from that, for state the changelog carries more compactly
// (one record for many keys): SetLocal writes are Pebble-only, and SetLogged
// writes put one value in Pebble and another in the changelog; the handler's
// restore expansion (eos.Config.Restore) turns the changelog record back
// into the Pebble keys.
package state

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrClosed is returned by operations on a closed Store.
var ErrClosed = errors.New("state: store closed")

// ErrFatal reports that Pebble failed in a way it cannot recover from (a WAL
// write or sync failed: I/O error, disk full). The store must not be used
// again; the process stops and, on restart, restores from the changelog what
// this store lost. Nothing is lost: Pebble is never ahead of Kafka.
var ErrFatal = errors.New("state: fatal storage error")

// Now is the store's clock (Options.Now): the one the match times of
// ChangelogPosition are stamped with, so their age must be taken with it.
func (s *Store) Now() time.Time { return s.now() }

// contain turns Pebble's fatal panic (its Logger.Fatalf) during a write into
// ErrFatal, so that the loop stops with an error instead of the process
// crashing mid-flight; the store is then unusable.
func (s *Store) contain(err *error) {
	if r := recover(); r != nil {
		s.broken.Store(true)
		*err = fmt.Errorf("%w: %v", ErrFatal, r)
	}
}

// Task names one input partition, the unit that owns state.
type Task struct {
	Topic     string
	Partition int32
}

func (t Task) String() string { return fmt.Sprintf("%s/%d", t.Topic, t.Partition) }

// Prefix returns the key prefix of every state key the task owns.
func (t Task) Prefix() []byte { return t.AppendPrefix(nil) }

// AppendPrefix appends the task's key prefix to dst.
func (t Task) AppendPrefix(dst []byte) []byte {
	dst = append(dst, 't')
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(t.Topic)))
	dst = append(dst, t.Topic...)
	return binary.BigEndian.AppendUint32(dst, uint32(t.Partition))
}

// changelogKey is the part of a task-owned key after the task prefix (false
// when key is not task-owned).
func changelogKey(key []byte) ([]byte, bool) {
	if len(key) < 3 || key[0] != 't' {
		return nil, false
	}
	n := int(binary.BigEndian.Uint16(key[1:3]))
	if len(key) < 3+n+4 {
		return nil, false
	}
	return key[3+n+4:], true
}

func offsetKey(t Task) []byte {
	k := t.AppendPrefix([]byte{'o'})
	return k
}

// offsetValue encodes a task's changelog position: the next offset to restore
// from, then the time (Unix nanoseconds) the state was known to match the
// changelog up to it. Stores written before the time was recorded hold the
// 8-byte offset alone.
func offsetValue(next int64, matched time.Time) []byte {
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 16), uint64(next))
	return binary.BigEndian.AppendUint64(v, uint64(matched.UnixNano()))
}

// Options tune the Pebble database.
type Options struct {
	// FS is the filesystem; nil means the real disk. Tests pass vfs.NewMem()
	// or an errorfs to inject faults.
	FS vfs.FS
	// CacheBytes is the block cache size; 0 means 64 MiB.
	CacheBytes int64
	// MemTableBytes is the memtable size; 0 means 32 MiB.
	MemTableBytes uint64
	// CachedValues bounds the in-memory cache of committed values (hot
	// aggregates read every few events); 0 means 262144, negative disables.
	CachedValues int
	// Cached selects, by changelog key (the key after the task prefix), the
	// keys the store keeps fast paths for: state read again soon
	// (aggregates). Their values enter the value cache when read and when
	// committed, and the key filter answers reads of such keys never
	// written. Other keys – write-once dedup marks, which their own per-task
	// filter and expiry cover – never do, so they cannot evict the hot
	// state, cost a commit nothing, and expired ones do not grow the key
	// filter. nil: every key (read values enter the cache, commits refresh
	// them).
	Cached func(changelogKey []byte) bool
	// FilterOnly narrows Cached: of the keys it selects, those whose
	// values stay out of the value cache (the key filter still answers
	// reads of them never written). For keys looked up often but whose
	// values are large and read back rarely, such as held events. nil: none.
	FilterOnly func(changelogKey []byte) bool
	// NoWAL runs Pebble without its write-ahead log, for a store that is
	// only a cache of changelogs: a commit reaches the memtable alone and is
	// durable once Pebble flushes it (with the changelog positions in its
	// batch, so the store on disk is always a prefix of the commits); a
	// crash loses the unflushed ones, which the restore reads back from the
	// changelog (docs/design.md#behind-kafka). Close flushes first.
	NoWAL bool
	// FlushEvery bounds, with NoWAL, how old the unflushed commits may get:
	// a commit that finds the last flush this long ago starts one (in the
	// background), so that a quiet store does not keep minutes of commits in
	// its memtable for a restart to read back. 0 means 10 s.
	FlushEvery time.Duration
	// Now is the clock that stamps a task's changelog position with the
	// time its state matched the changelog (ChangelogPosition); nil means
	// time.Now. Tests pass an older clock to age a store.
	Now func() time.Time
}

// Store is the Pebble database. It is safe for concurrent readers; writes go
// through Txn.Commit, Store.WriteAll (the loop's writer goroutine, one at a
// time) and Restore.
type Store struct {
	db    *pebble.DB
	cache *valueCache
	keys  *keyFilter
	// scanDone closes when the opening scan of keys into the filter ended;
	// stopScan ends it early (Close).
	scanDone chan struct{}
	stopScan atomic.Bool

	cached     func([]byte) bool
	filterOnly func([]byte) bool
	now        func() time.Time
	broken     atomic.Bool // a fatal error was contained: Close must not touch Pebble
	// commitOpts: pebble.Sync, or pebble.NoSync without a WAL (NoWAL).
	commitOpts *pebble.WriteOptions
	// Without a WAL: flushEvery (Options.FlushEvery), and when the commit
	// goroutine last started a flush (owned by it).
	flushEvery time.Duration
	lastFlush  time.Time
	flushDone  <-chan struct{}       // closes when the flush last started ends
	bgErr      atomic.Pointer[error] // the first background error without a WAL
	failed     chan struct{}         // closes at the first background error (failOnce)
	failOnce   sync.Once
}

// Open opens (creating if needed) the store in dir.
func Open(dir string, o Options) (*Store, error) { return openTuned(dir, o, nil) }

// openTuned is Open; tune, if not nil, changes Pebble's options last (the
// benchmarks that weigh Pebble's settings).
func openTuned(dir string, o Options, tune func(*pebble.Options)) (*Store, error) {
	if o.CacheBytes <= 0 {
		o.CacheBytes = 64 << 20
	}
	if o.MemTableBytes == 0 {
		o.MemTableBytes = 32 << 20
	}
	cache := pebble.NewCache(o.CacheBytes)
	defer cache.Unref()
	opts := &pebble.Options{
		FS:    o.FS,
		Cache: cache,
		// Set explicitly so an upgrade of Pebble never silently changes the
		// on-disk format under an operator.
		FormatMajorVersion: pebble.FormatNewest,
		MemTableSize:       o.MemTableBytes,
		Logger:             quietLogger{},
		DisableWAL:         o.NoWAL,
	}
	// Dedup lookups are mostly misses (new events): bloom filters on every
	// level let a miss skip the data blocks.
	for i := range opts.Levels {
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	s := &Store{cache: newValueCache(o.CachedValues), keys: newKeyFilter(), scanDone: make(chan struct{}), failed: make(chan struct{}),
		cached: o.Cached, filterOnly: o.FilterOnly, now: o.Now, commitOpts: pebble.Sync}
	if s.now == nil {
		s.now = time.Now
	}
	if o.NoWAL {
		s.commitOpts = pebble.NoSync
		s.flushEvery = cmp.Or(o.FlushEvery, 10*time.Second)
		s.lastFlush = s.now()
		// Without a WAL a failed write surfaces in the background flush, not
		// in the commit: Pebble retries the flush while commits pile up in
		// memtables until they stall. Fail the store instead, as a failed
		// WAL write does, so the next commit stops the loop.
		opts.EventListener = &pebble.EventListener{BackgroundError: s.failBackground}
	}
	if tune != nil {
		tune(opts)
	}
	db, err := pebble.Open(dir, opts)
	if err != nil {
		return nil, fmt.Errorf("state: open %s: %w", dir, err)
	}
	s.db = db
	go s.scanKeys()
	return s, nil
}

// writable is nil when the store takes writes: every write path (a commit,
// a restore, a reset) asks it first, so a store that failed – a WAL write,
// or without a WAL a background flush – refuses them all alike, rather than
// fill memtables that will never flush until Pebble stalls the writer.
func (s *Store) writable() error {
	if s.db == nil {
		return ErrClosed
	}
	if !s.broken.Load() {
		return nil
	}
	if e := s.bgErr.Load(); e != nil {
		return fmt.Errorf("%w: state: a background flush failed: %w", ErrFatal, *e)
	}
	return ErrFatal
}

// failBackground marks the store failed after a background flush or
// compaction error of a store without a WAL (Options.NoWAL): its commits
// then return ErrFatal with the cause.
func (s *Store) failBackground(err error) {
	s.bgErr.CompareAndSwap(nil, &err)
	s.broken.Store(true)
	s.failOnce.Do(func() { close(s.failed) })
}

// scanKeys adds every stored key to the key filter, then enables it. Keys
// written meanwhile are added by their writers, so the filter covers every
// key once the scan is done.
func (s *Store) scanKeys() {
	defer close(s.scanDone)
	it, err := s.db.NewIter(nil)
	if err != nil {
		return // the filter stays disabled: slower, never wrong
	}
	for it.First(); it.Valid(); it.Next() {
		if s.stopScan.Load() {
			_ = it.Close()
			return
		}
		if s.isCached(it.Key()) {
			s.keys.Add(it.Key())
		}
	}
	if it.Close() == nil {
		s.keys.complete.Store(true)
	}
}

// waitKeyScan blocks until the key filter is usable (tests of the filtered
// read path).
func (s *Store) waitKeyScan() { <-s.scanDone }

// Close closes the database. It is idempotent.
func (s *Store) Close() error {
	if s.db == nil {
		return nil
	}
	s.stopScan.Store(true)
	<-s.scanDone
	var err error
	if s.commitOpts == pebble.NoSync && !s.broken.Load() {
		// Without a WAL the memtables are all that hold the latest commits.
		err = s.flushOnClose()
	}
	// Checked after the flush too: a background error may have landed
	// before it, or while it retried and then succeeded.
	if err != nil || s.broken.Load() {
		if err == nil {
			err = s.writable() // ErrFatal, with the background error's cause
		}
		s.closeBroken()
		return err
	}
	err = s.db.Close()
	s.db = nil
	return err
}

// closeBroken closes a store whose Pebble failed (broken): only to release
// its files and lock, since Pebble's state is undefined after a fatal error.
func (s *Store) closeBroken() {
	db := s.db
	s.db = nil
	func() {
		defer func() { _ = recover() }()
		_ = db.Close()
	}()
}

// flushOnClose flushes the memtables of a store without a WAL. It waits for
// the flush only until the store fails: Pebble retries a failed flush (a
// full disk) at once and for ever, so Close would never return, spinning a
// core, and a worker told to stop would not stop. Then the commits since the
// last good flush are lost from this store, as in a crash, and the next start
// restores them from the changelog (docs/design.md#behind-kafka); Pebble's
// own Close ends the retries.
func (s *Store) flushOnClose() error {
	done, err := s.db.AsyncFlush()
	if err != nil {
		return fmt.Errorf("%w: state: flush at close: %w", ErrFatal, err)
	}
	select {
	case <-done:
		return nil
	case <-s.failed:
		return s.writable()
	}
}

// Abandon closes the store as a crash leaves it: without the flush Close
// does first, so a store without a WAL (Options.NoWAL) loses the commits
// its memtables held, as a killed process does. For tests that crash a
// worker inside their own process.
func (s *Store) Abandon() {
	if s.db != nil {
		s.broken.Store(true)
		_ = s.Close() // ErrFatal: it was abandoned
	}
}

// Get returns a copy of the value stored under key.
func (s *Store) Get(key []byte) ([]byte, bool, error) {
	if s.db == nil {
		return nil, false, ErrClosed
	}
	cached := s.isCached(key)
	var h uint64
	if cached {
		h = keyHash(key)
		// The value cache first: a hot key is in it, and a hit needs no
		// filter (it holds committed values only). The filter answers
		// the misses that were never written.
		if cached = s.valueCached(key); cached {
			if v, ok := s.cache.get(h, key); ok {
				return v, true, nil
			}
		}
		if !s.keys.mayContain(h) {
			return nil, false, nil // never written
		}
	}
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("state: get: %w", err)
	}
	if !cached {
		out := append([]byte(nil), v...)
		closer.Close()
		return out, true, nil
	}
	// Key and value in one allocation, the key first, as the guard stages
	// them: a cache hit compares the key, which brings the value in.
	kv := make([]byte, len(key)+len(v))
	copy(kv, key)
	out := kv[len(key):]
	copy(out, v)
	closer.Close()
	s.cache.put(h, ownedKey(kv[:len(key)]), out)
	return out, true, nil
}

// isCached reports whether the value cache holds key (Options.Cached).
func (s *Store) isCached(key []byte) bool {
	if s.cached == nil {
		return true
	}
	ck, ok := changelogKey(key)
	return ok && s.cached(ck)
}

// valueCached reports whether a key isCached selects also enters the value
// cache (not Options.FilterOnly).
func (s *Store) valueCached(key []byte) bool {
	if s.filterOnly == nil {
		return true
	}
	ck, ok := changelogKey(key)
	return !ok || !s.filterOnly(ck)
}

// ChangelogOffset returns the next changelog offset the task's state must be
// restored from (0 when the task has never been seen here).
func (s *Store) ChangelogOffset(t Task) (int64, error) {
	next, _, _, err := s.ChangelogPosition(t)
	return next, err
}

// ChangelogPosition returns the next changelog offset the task's state must
// be restored from and when the state was last known to match the changelog
// up to that offset: the time of the commit or restore batch that wrote the
// offset, or of the latest MarkMatched. ok is false when the task was never
// seen here (next is 0); matched is zero when unknown: the offset was written
// by a version that did not record the time.
func (s *Store) ChangelogPosition(t Task) (next int64, matched time.Time, ok bool, err error) {
	v, ok, err := s.Get(offsetKey(t))
	if err != nil || !ok {
		return 0, time.Time{}, false, err
	}
	switch len(v) {
	case 8:
		return int64(binary.BigEndian.Uint64(v)), time.Time{}, true, nil
	case 16:
		return int64(binary.BigEndian.Uint64(v)), time.Unix(0, int64(binary.BigEndian.Uint64(v[8:]))), true, nil
	}
	return 0, time.Time{}, false, fmt.Errorf("state: corrupt changelog offset for %s", t)
}

// MarkMatched records, durably, that the task's state matches its changelog
// now at the stored offset: the caller has seen that the changelog holds
// nothing past it. A task never seen here is left alone.
func (s *Store) MarkMatched(t Task) error {
	next, _, ok, err := s.ChangelogPosition(t)
	if err != nil || !ok {
		return err
	}
	return s.Restore(t, nil, next)
}

// Scan calls fn for every stored key with the given prefix, in key order.
// The slices are only valid during the call.
func (s *Store) Scan(prefix []byte, fn func(key, value []byte) error) error {
	return s.scanFrom(prefix, prefix, fn)
}

// scanFrom scans the keys with prefix that are ≥ from.
func (s *Store) scanFrom(prefix, from []byte, fn func(key, value []byte) error) error {
	if s.db == nil {
		return ErrClosed
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("state: scan: %w", err)
	}
	for it.First(); it.Valid(); it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return fmt.Errorf("state: scan: %w", err)
		}
		if err := fn(it.Key(), v); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Close(); err != nil {
		return fmt.Errorf("state: scan: %w", err)
	}
	return nil
}

// Reset deletes every key of the task and its changelog offset in one synced
// batch: used when the changelog was recreated and local state must go.
func (s *Store) Reset(t Task) error {
	if err := s.writable(); err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	pre := t.Prefix()
	if err := b.DeleteRange(pre, prefixEnd(pre), nil); err != nil {
		return fmt.Errorf("state: reset %s: %w", t, err)
	}
	if err := b.Delete(offsetKey(t), nil); err != nil {
		return fmt.Errorf("state: reset %s: %w", t, err)
	}
	s.cache.clear()
	if err := b.Commit(s.commitOpts); err != nil {
		return fmt.Errorf("state: reset %s: %w", t, err)
	}
	return nil
}

// Metrics exposes Pebble's metrics for the metrics exporter; nil once closed.
func (s *Store) Metrics() *pebble.Metrics {
	if s.db == nil {
		return nil
	}
	return s.db.Metrics()
}

// Restore applies changelog records of one task to Pebble and records next as
// the offset to restore from next time, stamped with the current time as when
// the state matched the changelog (ChangelogPosition), durably and atomically. A nil value is
// a tombstone. The caller has already dropped state that expired since it was
// written, and expanded compact records (eos.Config.Restore).
func (s *Store) Restore(t Task, recs []Record, next int64) (err error) {
	if err := s.writable(); err != nil {
		return err
	}
	defer s.contain(&err)
	b := s.db.NewBatch()
	defer b.Close()
	prefix := t.Prefix()
	key := make([]byte, 0, 128)
	for _, r := range recs {
		key = append(append(key[:0], prefix...), r.Key...)
		var err error
		switch {
		case r.End != nil:
			err = b.DeleteRange(key, append(append([]byte(nil), prefix...), r.End...), nil)
		case r.Value == nil:
			err = b.Delete(key, nil)
		default:
			if s.isCached(key) {
				s.keys.Add(key)
			}
			err = b.Set(key, r.Value, nil)
		}
		if err != nil {
			return fmt.Errorf("state: restore %s: %w", t, err)
		}
	}
	if s.isCached(offsetKey(t)) {
		s.keys.Add(offsetKey(t))
	}
	if err := b.Set(offsetKey(t), offsetValue(next, s.now()), nil); err != nil {
		return fmt.Errorf("state: restore %s: %w", t, err)
	}
	if err := b.Commit(s.commitOpts); err != nil {
		return fmt.Errorf("state: restore %s: %w", t, err)
	}
	// Values the records replaced may be cached: forget exactly those keys
	// (and the position), after the commit, so that a read between the two
	// cannot cache the old value again. Other keys – another task's warm
	// cache, written by the loop while a standby restores this one – stay.
	s.forget(offsetKey(t))
	for _, r := range recs {
		key = append(append(key[:0], prefix...), r.Key...)
		if r.End != nil {
			s.forgetRange(key)
		} else {
			s.forget(key)
		}
	}
	return nil
}

// forget drops key's cached value, if the value cache holds it.
func (s *Store) forget(key []byte) {
	if s.isCached(key) && s.valueCached(key) {
		s.cache.committed([]committedWrite{{key: string(key), valued: true, hash: keyHash(key)}}, false)
	}
}

// forgetRange drops what the value cache may hold of a range deleted from
// start on. The ranges deleted are of keys it never holds (dedup entries,
// which Options.Cached does not select), judged by the start key's kind;
// for any other range it drops everything, as a cache keyed by hash cannot
// find a range's keys.
func (s *Store) forgetRange(start []byte) {
	if s.isCached(start) && s.valueCached(start) {
		s.cache.clear()
	}
}

// Positions returns the next changelog offset of every task the store holds a
// position for (ChangelogPosition), read from Pebble now: what a standby
// replica or a restart has to offer the group's balancer.
func (s *Store) Positions() (map[Task]int64, error) {
	out := make(map[Task]int64)
	err := s.Scan([]byte{'o'}, func(k, v []byte) error {
		t, ok := parseTaskPrefix(k[1:])
		if !ok || (len(v) != 8 && len(v) != 16) {
			return fmt.Errorf("state: corrupt changelog position under key %q", k)
		}
		out[t] = int64(binary.BigEndian.Uint64(v))
		return nil
	})
	return out, err
}

// parseTaskPrefix reads the task of a key that is exactly a task prefix
// (Task.AppendPrefix).
func parseTaskPrefix(p []byte) (Task, bool) {
	if len(p) < 3 || p[0] != 't' {
		return Task{}, false
	}
	n := int(binary.BigEndian.Uint16(p[1:3]))
	if len(p) != 3+n+4 {
		return Task{}, false
	}
	return Task{Topic: string(p[3 : 3+n]), Partition: int32(binary.BigEndian.Uint32(p[3+n:]))}, true
}

// Record is one changelog entry: a key below a task prefix and its value (nil
// for a deletion). A Record with End set is a local range deletion instead,
// of the keys in [Key, End) below the task prefix, as Txn.DeleteRangeLocal
// stages one (a standby's expiry of dedup entries; no changelog carries it).
type Record struct {
	Key, Value []byte
	End        []byte
}

func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil
}

type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("pebble: "+format, args...))
}

var _ io.Closer = (*Store)(nil)
