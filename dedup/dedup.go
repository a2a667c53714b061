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
//   - Entries are keyed by time range, then id (decision 020): kind 'e', the
//     end of the mark time's epoch (retention/8 wide; unix ms, exclusive),
//     then the id. Marks arrive in time order, so a memtable's entries fall
//     in one or two epochs and Pebble's compactions never merge them with
//     older epochs; expiry deletes a whole epoch with one range deletion.
//   - A check costs no Pebble read when the task's in-memory filter says the
//     id is new (the common case) or the cache of recent ids knows it;
//     otherwise one bloom-filtered Get per epoch that may hold live entries
//     (at most 9–10), newest first, stopping at the first entry found.
//     Partition.epochs lists the task's epochs: built by the scan that builds
//     the filter, extended by Mark; an epoch leaves it only when a sweep
//     pass finds it gone from the store, so a clock that steps back still
//     finds every entry not yet deleted (as with the id-keyed layout).
//   - The changelog carries one record per segment, not per id: a segment is
//     the marks one task made in one transaction (at one mark time, at most
//     segmentMax ids), keyed by kind 'D', the mark time and the input offset
//     of its first mark. Pebble keeps a per-id entry (a local write: no
//     changelog record of its own) and a small marker per segment; Restore
//     expands a segment record back into its entries.
//   - Entries of the earlier layouts, kind 'd' keyed by id alone (written
//     before epochs; those written before segments also have a changelog
//     record each), are still read, restored and swept: a check asks for
//     one when the task's last scan found any.
//   - bounded-transaction: expiry is a sweep, in bounded chunks so that no
//     transaction grows large, through the staged transaction: it
//     tombstones expired segments (their markers are in mark time order),
//     so compaction reclaims them in the changelog too, deletes each epoch
//     whose entries have all expired with one local range deletion, and
//     deletes expired entries of the earlier layouts one by one. Until an
//     entry is swept it is simply ignored by Check; on restore an expired
//     entry is dropped, and an expired segment restores to its marker alone
//     (which the sweep then tombstones).
//   - A standby replica (docs/decisions/017) never sweeps: a segment's
//     tombstone reaches its store without the segment's entries, so the
//     standby deletes expired epochs and segment entries itself, locally
//     (Store.SweepLocal). It leaves the markers and the pre-segment
//     entries, whose tombstones only the owner produces.
//   - staged-writes-only: the store reads and writes through a staged
//     transaction, so a mark made in a transaction that aborts never existed.
package dedup

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"
)

// EpochKind is the key kind byte of dedup entries: the epoch's end, then
// the id.
const EpochKind = 'e'

// Kind is the key kind byte of dedup entries of the earlier layouts, keyed
// by id alone (read, restored and swept; no longer written).
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
// SetLocal keeps its key and value: the store passes buffers of their own.
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
	epochMs   int64 // an epoch's width: retention/8 in ms (at least 1)
}

// DefaultRetention is how long event ids are remembered unless configured
// otherwise (the configuration's dedup.retention defaults to it).
const DefaultRetention = 168 * time.Hour

// NewStore returns a store remembering ids for retention.
func NewStore(retention time.Duration) *Store {
	return &Store{retention: retention, epochMs: max(retention.Milliseconds()/8, 1)}
}

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

// Prefix is the key prefix of the task's dedup entries of the earlier
// layouts (kind 'd').
func Prefix(taskPrefix []byte) []byte { return append(append([]byte(nil), taskPrefix...), Kind) }

// EpochPrefix is the key prefix of the task's dedup entries (kind 'e').
func EpochPrefix(taskPrefix []byte) []byte {
	return append(append([]byte(nil), taskPrefix...), EpochKind)
}

// epochEntryLen is the length of an entry's key below the task prefix.
const epochEntryLen = 1 + 8 + len(ID{})

// epochEnd is the end (exclusive) of the epoch a mark made at unix ms at
// falls in. An epoch is retention/8 wide, so that at most nine or ten hold
// live entries.
func (s *Store) epochEnd(at int64) int64 { return (at/s.epochMs + 1) * s.epochMs }

// appendEpochStart appends the first key the task's entries in the epoch
// ending at end can have: every one of them starts with it.
func appendEpochStart(dst, taskPrefix []byte, end int64) []byte {
	dst = append(dst, taskPrefix...)
	dst = append(dst, EpochKind)
	return binary.BigEndian.AppendUint64(dst, uint64(end))
}

// appendEpochKey appends the key of the task's entry for id in the epoch
// ending at end.
func appendEpochKey(dst, taskPrefix []byte, end int64, id ID) []byte {
	return append(appendEpochStart(dst, taskPrefix, end), id[:]...)
}

// parseEpochKey splits the key of an entry of the task under taskPrefix
// into its epoch's end and its id; ok is false for any other key.
func parseEpochKey(k, taskPrefix []byte) (end int64, id ID, ok bool) {
	if len(k) != len(taskPrefix)+epochEntryLen || k[len(taskPrefix)] != EpochKind {
		return 0, ID{}, false
	}
	k = k[len(taskPrefix)+1:]
	return int64(binary.BigEndian.Uint64(k)), ID(k[8:]), true
}

// segmentPrefix is the key prefix of the task's segment markers.
func segmentPrefix(taskPrefix []byte) []byte {
	return append(append(make([]byte, 0, len(taskPrefix)+segmentKeyLen), taskPrefix...), SegmentKind)
}

// appendKey appends the key of the task's entry for id in the earlier
// layouts.
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

// putEntry fills a segment-restored entry value (segmentEntryLen bytes).
func putEntry(v, fp []byte, at int64) {
	copy(v, fp)
	binary.BigEndian.PutUint64(v[32:], uint64(at))
	v[entryLen] = fromSegment
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
// (eos.Config.Restore): a segment becomes its marker and entries under their
// epoch (an expired one its marker only), expired entries of the pre-segment
// layout are dropped, anything else passes through as it is.
// It fails only on a corrupt segment or entry: one Check or the sweep could
// not read (docs/contract.md#corrupt-changelog-records).
func (s *Store) Restore(key, value []byte, now time.Time, emit func(key, value []byte)) error {
	switch {
	case len(key) == 0 || value == nil:
		emit(key, value)
	case key[0] == Kind && (len(key) != 1+len(ID{}) || len(value) != entryLen):
		// The changelog holds entries of the pre-segment layout only (a
		// segment's entries are local writes).
		return fmt.Errorf("%w: entry %x (%d bytes)", ErrCorrupt, key, len(value))
	case key[0] == Kind && !s.live(value, now):
		// An expired entry of the pre-segment layout.
	case key[0] == EpochKind:
		// Entries under their epoch are local writes: no changelog carries one.
		return fmt.Errorf("%w: epoch entry %x in a changelog", ErrCorrupt, key)
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
	const kl = epochEntryLen
	end := s.epochEnd(at)
	buf := make([]byte, n*(kl+segmentEntryLen)) // one allocation for all entries
	for i := range n {
		item := value[1+i*segmentItem:][:segmentItem]
		k := appendEpochKey(buf[:0:kl], nil, end, ID(item[:len(ID{})]))
		v := buf[kl : kl+segmentEntryLen : kl+segmentEntryLen]
		putEntry(v, item[len(ID{}):], at)
		buf = buf[kl+segmentEntryLen:]
		emit(k, v)
	}
	return nil
}
