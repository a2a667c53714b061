// Package dedup remembers which events a processor has seen, so that a
// redelivered event is recognised and a reused event id with a different intent
// is caught.
//
// Invariants:
//
//   - The dedup scope is processor name + source topic + tenantId + eventId.
//     The processor name and topic are fixed per state store and task, so the
//     key stored here is a 128-bit hash of (tenantId, eventId) below the task
//     prefix. (A collision needs ~2^64 ids in one partition.)
//   - An entry holds the event's fingerprint and when it was marked: the same
//     id with the same fingerprint is a Duplicate, with another fingerprint a
//     Conflict, as long as the entry is younger than the retention.
//   - One point lookup per check: the key does not depend on time, so a miss
//     (the common case, a new event) costs one bloom-filtered Get.
//   - Expiry is a sweep that deletes entries older than the retention through
//     the staged transaction, so the deletions reach the changelog as
//     tombstones and compaction reclaims them there too; the sweep works in
//     bounded chunks so that no transaction grows large. Until an entry is
//     swept it is simply ignored by Check and dropped on restore.
//   - The store reads and writes through a staged transaction, so a mark made
//     in a transaction that aborts never existed.
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

// Kind is the changelog-key kind byte of dedup entries.
const Kind = 'd'

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
	Set(key, val []byte)
}

// ErrCorrupt reports an entry that cannot be decoded.
var ErrCorrupt = errors.New("dedup: corrupt entry")

// entryLen is the stored value: fingerprint, then the mark time in unix ms.
const entryLen = 32 + 8

// Store checks and marks event ids. It holds no state of its own beyond its
// configuration.
type Store struct {
	retention time.Duration
}

// NewStore returns a store remembering ids for retention.
func NewStore(retention time.Duration) *Store { return &Store{retention: retention} }

// Retention is how long ids are remembered.
func (s *Store) Retention() time.Duration { return s.retention }

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
	at := int64(binary.BigEndian.Uint64(v[32:]))
	return now.UnixMilli()-at <= s.retention.Milliseconds()
}

// Check reports whether id was seen within the retention window, and if so
// whether with the same fingerprint. f, if not nil, answers most misses
// without reading the store.
func (s *Store) Check(kv KV, f *Filter, taskPrefix []byte, id ID, fp [32]byte, now time.Time) (Verdict, error) {
	if f != nil && !f.MayContain(id) {
		return New, nil
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
	if len(v) != entryLen {
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

// Mark records id with its fingerprint at now (and in f, if not nil).
func (s *Store) Mark(kv KV, f *Filter, taskPrefix []byte, id ID, fp [32]byte, now time.Time) {
	if f != nil {
		f.Add(id)
	}
	// One allocation for both: KV.Set keeps the value (and may keep the key).
	n := len(taskPrefix) + 1 + len(id)
	buf := make([]byte, n+entryLen)
	k := appendKey(buf[:0:n], taskPrefix, id)
	v := buf[n:]
	copy(v, fp[:])
	binary.BigEndian.PutUint64(v[32:], uint64(now.UnixMilli()))
	kv.Set(k, v)
}

// Expired reports whether a changelog record (kind byte first in the key)
// is a dedup entry past the retention: the processor drops such records on
// restore instead of resurrecting them.
func (s *Store) Expired(changelogKey, value []byte, now time.Time) bool {
	if len(changelogKey) < 1 || changelogKey[0] != Kind || len(value) != entryLen {
		return false
	}
	return !s.live(value, now)
}

// Sweeper deletes expired entries of one task, a bounded chunk at a time.
// Its zero value starts a pass at once; NewSweeper waits a period first.
type Sweeper struct {
	next   time.Time // when the next pass may start
	cursor []byte    // where the current pass continues; nil: no pass running
}

// SweepKV is what a sweep needs: a scan that sees the staged overlay, and
// deletions that become changelog tombstones.
type SweepKV interface {
	ScanFrom(prefix, from []byte, fn func(key, value []byte) error) error
	Delete(key []byte)
}

// errChunk stops a scan at the chunk boundary.
var errChunk = errors.New("dedup: chunk done")

// Sweep runs one chunk of the expiry pass over the task's entries when one is
// due (a pass starts every retention/8 and continues chunk by chunk). It
// examines at most examine entries, deletes the expired ones through kv and
// returns how many it deleted.
func (s *Store) Sweep(sw *Sweeper, kv SweepKV, taskPrefix []byte, now time.Time, examine int) (int, error) {
	if sw.cursor == nil {
		if now.Before(sw.next) {
			return 0, nil
		}
		sw.cursor = Prefix(taskPrefix)
	}
	prefix := Prefix(taskPrefix)
	seen, deleted := 0, 0
	var last []byte
	err := kv.ScanFrom(prefix, sw.cursor, func(k, v []byte) error {
		if seen >= examine {
			last = append(last[:0], k...)
			return errChunk
		}
		seen++
		if len(v) == entryLen && !s.live(v, now) {
			kv.Delete(append([]byte(nil), k...))
			deleted++
		}
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

// NewSweeper returns a sweeper whose first pass starts one period (retention/8)
// after now, so that a restart does not begin with a full scan.
func (s *Store) NewSweeper(now time.Time) *Sweeper { return &Sweeper{next: now.Add(s.retention / 8)} }
