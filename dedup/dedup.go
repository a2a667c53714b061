// Package dedup remembers which events a processor has seen, so that a
// redelivered event is recognised and a reused event id with a different intent
// is caught.
//
// Invariants (named in docs/design.md#invariants where they have a name):
//
//   - duplicates-absorbed: the dedup scope is processor name + source
//     topic + tenantId + eventId. The processor name and topic are fixed per
//     state store and task, so the key stored here is a 128-bit hash of
//     (tenantId, eventId) below the task prefix. (A collision needs ~2^64 ids
//     in one partition.)
//   - duplicates-absorbed: an entry holds the event's fingerprint and when it
//     was marked: the same id with the same fingerprint is a Duplicate, with
//     another fingerprint a Conflict, as long as the entry is younger than
//     the retention.
//   - One point lookup per check: the key does not depend on time, so a miss
//     (the common case, a new event) costs one bloom-filtered Get.
//   - The changelog carries one record per segment, not per id: a segment is
//     the marks one task made in one transaction (at one mark time, at most
//     segmentMax ids), keyed by kind 'D', the mark time and the input offset
//     of its first mark. Pebble keeps a per-id entry (a local write: no
//     changelog record of its own) and a small marker per segment; Restore
//     expands a segment record back into its entries. Entries written
//     before segments existed (one changelog record each) are still read,
//     restored and swept.
//   - bounded-transaction: expiry is a sweep, in bounded chunks so that no
//     transaction grows large, through the staged transaction: it deletes
//     expired entries locally and tombstones expired segments (their markers
//     are in mark time order), so compaction reclaims them in the changelog
//     too. Until an entry is swept it is simply ignored by Check; on restore
//     an expired entry is dropped, and an expired segment restores to its
//     marker alone (which the sweep then tombstones).
//   - staged-writes-only: the store reads and writes through a staged
//     transaction, so a mark made in a transaction that aborts never existed.
package dedup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Kind is the key kind byte of dedup entries.
const Kind = 'd'

// SegmentKind is the key kind byte of dedup segments.
const SegmentKind = 'D'

// Verdict is the result of a dedup check.
type Verdict uint8

const (
	New Verdict = iota
	Duplicate
	Conflict
)

func (v Verdict) String() string {
	switch v {
	case New:
		return "new"
	case Duplicate:
		return "duplicate"
	case Conflict:
		return "conflict"
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// KV is the staged state the store reads and writes (a *state.Txn).
type KV interface {
	Get(key []byte) ([]byte, bool, error)
	SetLocal(key, val []byte)
	SetLogged(key, val, log []byte)
}

// ErrCorrupt reports an entry or segment that cannot be decoded.
var ErrCorrupt = errors.New("dedup: corrupt entry")

// An entry's value is the fingerprint, then the mark time in unix ms; an
// entry its segment restores has one more byte (segmentEntryLen), so the
// sweep knows it has no changelog record of its own to tombstone.
const (
	entryLen        = 32 + 8
	segmentEntryLen = entryLen + 1
	fromSegment     = 1
)

// A segment's changelog value is a version byte, then per id the id and
// the fingerprint. Its key is the kind, the mark time (unix ms) and the
// input offset of its first mark, 8 bytes each, big-endian: unique per
// task, and in time order. Its Pebble value is the id count.
const (
	segmentVersion = 1
	segmentItem    = len(ID{}) + 32
	segmentKeyLen  = 1 + 8 + 8
)

// segmentMax bounds a segment's ids: 2048 × 48 bytes (97 KiB) stays far
// under Kafka's default 1 MiB record limit and the lower limits some
// clusters set, at one record per 2048 marks.
const segmentMax = 2048

// Store checks and marks event ids. It holds no state of its own beyond its
// configuration.
type Store struct {
	retention time.Duration
}

// NewStore returns a store remembering ids for retention.
func NewStore(retention time.Duration) *Store { return &Store{retention: retention} }

// ID is the hashed dedup identity of one event within a task.
type ID [16]byte

// MakeID hashes (tenantId, eventId) unambiguously (length-prefixed tenant).
// It runs once per event: the input is assembled on the stack for ids of
// ordinary length, so the common case does not allocate.
func MakeID(tenant, eventID string) ID {
	var stack [256]byte
	buf := stack[:0]
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(tenant)))
	buf = append(buf, tenant...)
	buf = append(buf, eventID...)
	sum := sha256.Sum256(buf)
	var id ID
	copy(id[:], sum[:])
	return id
}

// Prefix is the key prefix of the task's dedup entries.
func Prefix(taskPrefix []byte) []byte { return append(append([]byte(nil), taskPrefix...), Kind) }

// segmentPrefix is the key prefix of the task's segment markers.
func segmentPrefix(taskPrefix []byte) []byte {
	return append(append(make([]byte, 0, len(taskPrefix)+segmentKeyLen), taskPrefix...), SegmentKind)
}

func appendKey(dst, taskPrefix []byte, id ID) []byte {
	dst = append(dst, taskPrefix...)
	dst = append(dst, Kind)
	return append(dst, id[:]...)
}

// keyBufs hold the key of a Check while KV.Get runs: a Get does not keep
// its key (a *state.Txn copies what it keeps), and a buffer on the stack
// would escape to the heap through the interface call on every check.
var keyBufs = sync.Pool{New: func() any { b := make([]byte, 0, 128); return &b }}

// live reports whether a stored entry is still inside the retention window.
func (s *Store) live(v []byte, now time.Time) bool {
	return s.liveAt(int64(binary.BigEndian.Uint64(v[32:])), now)
}

// liveAt reports whether a mark made at unix ms at is inside the window.
func (s *Store) liveAt(at int64, now time.Time) bool {
	return now.UnixMilli()-at <= s.retention.Milliseconds()
}

func validEntry(v []byte) bool {
	return len(v) == entryLen || (len(v) == segmentEntryLen && v[entryLen] == fromSegment)
}

// Check reports whether id was seen within the retention window, and if so
// whether with the same fingerprint. f, if not nil, answers most misses
// without reading the store; r, if not nil, most recent duplicates.
func (s *Store) Check(kv KV, f *Filter, r *Recent, taskPrefix []byte, id ID, fp [32]byte, now time.Time) (Verdict, error) {
	if f != nil && !f.MayContain(id) {
		return New, nil
	}
	if v, known := s.recentVerdict(r, id, fp, now); known {
		return v, nil
	}
	kb := keyBufs.Get().(*[]byte)
	key := appendKey((*kb)[:0], taskPrefix, id)
	v, ok, err := kv.Get(key)
	*kb = key[:0]
	keyBufs.Put(kb)
	if err != nil {
		return New, fmt.Errorf("dedup: check: %w", err)
	}
	if !ok {
		return New, nil
	}
	if !validEntry(v) {
		return New, ErrCorrupt
	}
	if !s.live(v, now) {
		return New, nil // expired, not yet swept
	}
	if bytes.Equal(v[:32], fp[:]) {
		return Duplicate, nil
	}
	return Conflict, nil
}

// recentVerdict answers from r: known is false when id is not there or its
// mark has expired (then the store must be asked). A known id is a Duplicate
// when the fingerprint prefixes match, a Conflict otherwise (a different
// event under the same id agreeing on 64 bits by chance is ignored).
func (s *Store) recentVerdict(r *Recent, id ID, fp [32]byte, now time.Time) (v Verdict, known bool) {
	at, same, ok := r.find(id, fp)
	if !ok || !s.liveAt(at, now) {
		return New, false
	}
	if same {
		return Duplicate, true
	}
	return Conflict, true
}

// Marks collects one task's marks in one transaction into segments. The
// zero value is ready; Stage writes the segment being built. A Marks must not
// outlive its transaction (an aborted transaction's Marks is dropped with it);
// once the transaction committed, Recent.AddStaged takes its staged marks.
type Marks struct {
	first  int64  // input offset of the segment's first mark
	at     int64  // the segment's mark time, unix ms
	n      int    // ids in buf
	buf    []byte // the segment's changelog value so far
	staged []segment
}

// segment is a staged segment's value and mark time.
type segment struct {
	at  int64
	buf []byte
}

// Mark records id with its fingerprint at now (and in f, if not nil): an
// entry in Pebble, and an item of the segment m builds for the changelog.
// offset is the input record's offset.
func (s *Store) Mark(kv KV, f *Filter, m *Marks, taskPrefix []byte, offset int64, id ID, fp [32]byte, now time.Time) {
	if f != nil {
		f.Add(id)
	}
	at := now.UnixMilli()
	if m.n > 0 && (m.at != at || m.n == segmentMax) {
		s.Stage(kv, m, taskPrefix)
	}
	if m.n == 0 {
		m.first, m.at = offset, at
		m.buf = append(make([]byte, 0, 4096), segmentVersion)
	}
	m.buf = append(append(m.buf, id[:]...), fp[:]...)
	m.n++
	// One allocation for both: KV.SetLocal keeps the value (and may keep
	// the key).
	n := len(taskPrefix) + 1 + len(id)
	buf := make([]byte, n+segmentEntryLen)
	k := appendKey(buf[:0:n], taskPrefix, id)
	putEntry(buf[n:], fp[:], at)
	kv.SetLocal(k, buf[n:])
}

// putEntry fills a segment-restored entry value (segmentEntryLen bytes).
func putEntry(v, fp []byte, at int64) {
	copy(v, fp)
	binary.BigEndian.PutUint64(v[32:], uint64(at))
	v[entryLen] = fromSegment
}

// Stage writes the segment m holds, if any, into kv (its changelog record and
// Pebble marker) and empties m. Call it before the transaction's changelog
// records are produced; Mark calls it when a segment is full.
func (s *Store) Stage(kv KV, m *Marks, taskPrefix []byte) {
	if m.n == 0 {
		return
	}
	key := binary.BigEndian.AppendUint64(segmentPrefix(taskPrefix), uint64(m.at))
	key = binary.BigEndian.AppendUint64(key, uint64(m.first))
	kv.SetLogged(key, binary.BigEndian.AppendUint32(nil, uint32(m.n)), m.buf)
	*m = Marks{staged: append(m.staged, segment{m.at, m.buf})}
}

// eachStaged calls fn for every mark of the staged segments (the buffers are
// immutable once staged: the txn holds them as changelog values).
func (m *Marks) eachStaged(fn func(id ID, fp []byte, at int64)) {
	for _, sg := range m.staged {
		for item := sg.buf[1:]; len(item) >= segmentItem; item = item[segmentItem:] {
			fn(ID(item[:len(ID{})]), item[len(ID{}):segmentItem], sg.at)
		}
	}
}

// Restore is the restore expansion of dedup's changelog records
// (eos.Config.Restore): a segment becomes its marker and entries (an expired
// one its marker only), expired entries are dropped, anything else passes
// through as it is.
// It fails only on a corrupt segment.
func (s *Store) Restore(key, value []byte, now time.Time, emit func(key, value []byte)) error {
	switch {
	case len(key) == 0 || value == nil:
		emit(key, value)
	case key[0] == Kind && len(value) == entryLen && !s.live(value, now):
		// An expired entry of the pre-segment layout.
	case key[0] == SegmentKind:
		return s.expand(key, value, now, emit)
	default:
		emit(key, value)
	}
	return nil
}

// expand emits a segment's marker and entries; of an expired segment only
// the marker, so that this instance's sweep tombstones the record (nobody
// else may: the instance that wrote it may never sweep again).
func (s *Store) expand(key, value []byte, now time.Time, emit func(key, value []byte)) error {
	if len(key) != segmentKeyLen || len(value) < 1 || value[0] != segmentVersion || (len(value)-1)%segmentItem != 0 {
		return fmt.Errorf("%w: segment %x (%d bytes)", ErrCorrupt, key, len(value))
	}
	n := (len(value) - 1) / segmentItem
	emit(key, binary.BigEndian.AppendUint32(nil, uint32(n)))
	at := int64(binary.BigEndian.Uint64(key[1:]))
	if !s.liveAt(at, now) {
		return nil
	}
	const kl = 1 + len(ID{})
	buf := make([]byte, n*(kl+segmentEntryLen)) // one allocation for all entries
	for i := range n {
		item := value[1+i*segmentItem:][:segmentItem]
		k := buf[:kl:kl]
		k[0] = Kind
		copy(k[1:], item[:len(ID{})])
		v := buf[kl : kl+segmentEntryLen : kl+segmentEntryLen]
		putEntry(v, item[len(ID{}):], at)
		buf = buf[kl+segmentEntryLen:]
		emit(k, v)
	}
	return nil
}

// Sweeper deletes expired entries of one task, a bounded chunk at a time.
// Its zero value starts a pass at once; NewSweeper waits a period first.
type Sweeper struct {
	next   time.Time // when the next pass may start
	cursor []byte    // where the current pass's entries continue; nil: no pass running
	// segments is where the pass's segment phase continues (nil: done), so
	// that no chunk walks again over the markers an earlier chunk deleted.
	segments []byte
}

// Due reports whether Sweep has work at now: a pass under way, or the next
// one due. (The caller can skip staging anything for the sweep otherwise.)
func (sw *Sweeper) Due(now time.Time) bool { return sw.cursor != nil || !now.Before(sw.next) }

// SweepKV is what a sweep needs: a scan that sees the staged overlay,
// deletions that become changelog tombstones, and local ones.
type SweepKV interface {
	ScanFrom(prefix, from []byte, fn func(key, value []byte) error) error
	Delete(key []byte)
	DeleteLocal(key []byte)
}

// errChunk stops a scan at the chunk boundary.
var errChunk = errors.New("dedup: chunk done")

// Sweep runs one chunk of the expiry pass over the task's entries when one is
// due (a pass starts every retention/8 and continues chunk by chunk). A pass
// first tombstones the expired segments, then deletes the expired entries.
// It examines at most examine keys, deletes the expired ones through kv and
// returns how many it deleted.
func (s *Store) Sweep(sw *Sweeper, kv SweepKV, taskPrefix []byte, now time.Time, examine int) (int, error) {
	if !sw.Due(now) {
		return 0, nil
	}
	if sw.cursor == nil {
		sw.cursor = Prefix(taskPrefix)
		sw.segments = segmentPrefix(taskPrefix)
	}
	deleted := 0
	if sw.segments != nil {
		n, err := s.sweepSegments(sw, kv, taskPrefix, now, examine)
		if err != nil || sw.segments != nil {
			return n, err
		}
		deleted = n
	}
	prefix := Prefix(taskPrefix)
	seen := deleted // the segments tombstoned count against the chunk
	var last []byte
	err := kv.ScanFrom(prefix, sw.cursor, func(k, v []byte) error {
		if seen >= examine {
			last = append(last[:0], k...)
			return errChunk
		}
		seen++
		if !validEntry(v) || s.live(v, now) {
			return nil
		}
		if len(v) == entryLen {
			kv.Delete(append([]byte(nil), k...)) // it has its own changelog record
		} else {
			kv.DeleteLocal(append([]byte(nil), k...)) // its segment's tombstone covers it
		}
		deleted++
		return nil
	})
	switch {
	case errors.Is(err, errChunk):
		sw.cursor = last
	case err != nil:
		return deleted, err
	default:
		sw.cursor = nil
		sw.next = now.Add(s.retention / 8)
	}
	return deleted, nil
}

// sweepSegments tombstones up to examine expired segments, oldest first,
// from the pass's segment cursor; it clears the cursor once it reached the
// first live segment (or the end).
func (s *Store) sweepSegments(sw *Sweeper, kv SweepKV, taskPrefix []byte, now time.Time, examine int) (int, error) {
	prefix := segmentPrefix(taskPrefix)
	deleted := 0
	var next []byte // nil: the segment phase is done
	err := kv.ScanFrom(prefix, sw.segments, func(k, _ []byte) error {
		if len(k) != len(taskPrefix)+segmentKeyLen {
			return nil // not ours to judge; Restore would have refused it
		}
		if s.liveAt(int64(binary.BigEndian.Uint64(k[len(prefix):])), now) {
			return errChunk // markers are in time order: the rest are live
		}
		if deleted >= examine {
			next = append([]byte(nil), k...)
			return errChunk
		}
		kv.Delete(append([]byte(nil), k...))
		deleted++
		return nil
	})
	if err != nil && !errors.Is(err, errChunk) {
		return deleted, err
	}
	sw.segments = next
	return deleted, nil
}

// NewSweeper returns a sweeper whose first pass starts one period (retention/8)
// after now, so that a restart does not begin with a full scan.
func (s *Store) NewSweeper(now time.Time) *Sweeper { return &Sweeper{next: now.Add(s.retention / 8)} }
