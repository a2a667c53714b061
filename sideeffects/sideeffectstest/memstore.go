package sideeffectstest

import (
	"sort"
	"strings"
	"sync"

	"github.com/projector-dev/projector/internal/core/staging"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// MemKV is an in-memory effect.KV. It is safe for concurrent
// use; Scan works on a snapshot, so fn may write.
type MemKV struct {
	mu sync.Mutex
	m  map[string][]byte
}

// NewMemKV returns an empty MemKV.
func NewMemKV() *MemKV { return &MemKV{m: make(map[string][]byte)} }

// Get implements effect.KV.
func (kv *MemKV) Get(key []byte) ([]byte, bool, error) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	v, ok := kv.m[string(key)]
	return v, ok, nil
}

// Set implements effect.KV.
func (kv *MemKV) Set(key, val []byte) {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	kv.m[string(key)] = append([]byte(nil), val...)
}

// Scan implements effect.KV.
func (kv *MemKV) Scan(prefix []byte, fn func(key, value []byte) error) error {
	kv.mu.Lock()
	var keys []string
	for k := range kv.m {
		if strings.HasPrefix(k, string(prefix)) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	vals := make([][]byte, len(keys))
	for i, k := range keys {
		vals[i] = kv.m[k]
	}
	kv.mu.Unlock()
	for i, k := range keys {
		if err := fn([]byte(k), vals[i]); err != nil {
			return err
		}
	}
	return nil
}

// MemStore is a sideeffects.Store over a MemKV: each Update stages its writes and applies
// them all at once when fn returns nil, and discards them otherwise, like a
// Kafka transaction followed by the Pebble commit. Updates are serialised.
type MemStore struct {
	mu     sync.Mutex
	KV     *MemKV
	Prefix []byte
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{KV: NewMemKV()} }

// Update implements sideeffects.Store.
func (s *MemStore) Update(fn func(*effect.Ledger) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	tx := staging.New(s.KV)
	if err := fn(effect.NewLedger(tx, s.Prefix)); err != nil {
		return err
	}
	tx.Flush()
	return nil
}

// View implements sideeffects.Store: fn's writes, if any, are discarded.
func (s *MemStore) View(fn func(*effect.Ledger) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fn(effect.NewLedger(staging.New(s.KV), s.Prefix))
}
