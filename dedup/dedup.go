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
//   - An entry holds the event's fingerprint: the same id with the same
//     fingerprint is a Duplicate, with another fingerprint a Conflict.
//   - Entries live in time buckets (retention/Buckets wide); the bucket is part
//     of the key, so expiry is one range delete per bucket and a lookup checks
//     every bucket still inside the retention window. An entry is remembered for
//     at least Retention and at most Retention plus one bucket.
//   - The store reads and writes through a staged transaction, so a mark made
//     in a transaction that aborts never existed.
package dedup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Kind is the changelog-key kind byte of dedup entries.
const Kind = 'd'

// Buckets is how many time buckets the retention window is cut into.
const Buckets = 8

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

// Store checks and marks event ids. It holds no state of its own beyond its
// configuration.
type Store struct {
	retention time.Duration
	bucket    time.Duration
}

// NewStore returns a store remembering ids for retention.
func NewStore(retention time.Duration) *Store {
	b := retention / Buckets
	if b < time.Second {
		b = time.Second
	}
	return &Store{retention: retention, bucket: b}
}

// ID is the hashed dedup identity of one event within a task.
type ID [16]byte

// MakeID hashes (tenantId, eventId) unambiguously.
func MakeID(tenant, eventID string) ID {
	h := sha256.New()
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(tenant)))
	h.Write(n[:])
	h.Write([]byte(tenant))
	h.Write([]byte(eventID))
	var sum [32]byte
	var id ID
	copy(id[:], h.Sum(sum[:0]))
	return id
}

func (s *Store) bucketOf(t time.Time) uint64 { return uint64(t.UnixNano() / int64(s.bucket)) }

// appendKey appends the full state key of id in bucket b below taskPrefix.
func appendKey(dst, taskPrefix []byte, b uint64, id ID) []byte {
	dst = append(dst, taskPrefix...)
	dst = append(dst, Kind)
	dst = binary.BigEndian.AppendUint64(dst, b)
	return append(dst, id[:]...)
}

// Check reports whether id was seen within the retention window, and if so
// whether with the same fingerprint.
func (s *Store) Check(kv KV, taskPrefix []byte, id ID, fp [32]byte, now time.Time) (Verdict, error) {
	newest := s.bucketOf(now)
	oldest := s.bucketOf(now.Add(-s.retention))
	var key [128]byte
	// newest+1 tolerates a clock that stepped back by up to one bucket.
	for b := newest + 1; ; b-- {
		k := appendKey(key[:0], taskPrefix, b, id)
		v, ok, err := kv.Get(k)
		if err != nil {
			return New, fmt.Errorf("dedup: check: %w", err)
		}
		if ok {
			if len(v) != 32 {
				return New, ErrCorrupt
			}
			if bytes.Equal(v, fp[:]) {
				return Duplicate, nil
			}
			return Conflict, nil
		}
		if b == oldest {
			break
		}
	}
	return New, nil
}

// Mark records id with its fingerprint in the current bucket.
func (s *Store) Mark(kv KV, taskPrefix []byte, id ID, fp [32]byte, now time.Time) {
	k := appendKey(make([]byte, 0, len(taskPrefix)+25), taskPrefix, s.bucketOf(now), id)
	kv.Set(k, append([]byte(nil), fp[:]...))
}

// Expired reports whether a changelog key of this kind (kind byte first, as
// produced to the changelog) lies in a bucket that has left the window. The
// processor drops such records on restore instead of resurrecting them.
func (s *Store) Expired(changelogKey []byte, now time.Time) bool {
	if len(changelogKey) < 9 || changelogKey[0] != Kind {
		return false
	}
	return binary.BigEndian.Uint64(changelogKey[1:9]) < s.bucketOf(now.Add(-s.retention))
}

// ExpiredRange returns the key range [start, end) of the task's buckets that
// have left the window, for one range delete.
func (s *Store) ExpiredRange(taskPrefix []byte, now time.Time) (start, end []byte) {
	start = append(append([]byte(nil), taskPrefix...), Kind)
	end = binary.BigEndian.AppendUint64(append([]byte(nil), start...), s.bucketOf(now.Add(-s.retention)))
	return start, end
}
