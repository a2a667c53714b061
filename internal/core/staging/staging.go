// Package staging holds the key-value layers the processor and the executor
// put between their code and the transaction's state.Txn: an Overlay that
// stages writes aside so they can be kept or dropped whole, and ReadOnly,
// the committed state of a store for reads outside a transaction.
package staging

import (
	"bytes"
	"sort"

	"github.com/projector-dev/projector/internal/core/state"
)

// KV is what an Overlay reads through and flushes into: a state.Txn, another
// Overlay, an in-memory map. Scan calls fn in key order; the slices are valid
// only during the call. A KV whose Overlays stage deletions must also have a
// Delete(key) method (the version guard's KV, internal/engine/guard, does).
type KV interface {
	Get(key []byte) ([]byte, bool, error)
	Set(key, val []byte)
	Scan(prefix []byte, fn func(key, value []byte) error) error
}

type deleter interface{ Delete(key []byte) }

// Write is one staged write: a set of Key to Val, or a deletion of Key.
type Write struct {
	Key, Val []byte
	Deleted  bool
}

// Overlay stages writes over a base KV, so that work that turns out to be
// unwanted (a guard step whose outputs are too large, a ledger update that
// fails) can be dropped whole before anything of it reaches the base: Flush
// copies the writes into the base once the work is kept. Reads see the
// staged writes first. A unit of work writes a handful of keys, so the
// writes are a slice searched linearly: cheaper than a map on the
// processor's hot path. An Overlay is not safe for concurrent use.
type Overlay struct {
	base   KV
	writes []Write
}

// New returns an empty Overlay over base.
func New(base KV) *Overlay { return &Overlay{base: base} }

// Reset drops the staged writes and sets the base: the Overlay is as New
// made it, reusing the room of its writes (for a caller that stages one
// unit of work after another, such as the processor's guard steps).
func (o *Overlay) Reset(base KV) {
	o.base = base
	o.writes = o.writes[:0]
}

func (o *Overlay) find(key []byte) int {
	for i := len(o.writes) - 1; i >= 0; i-- {
		if bytes.Equal(o.writes[i].Key, key) {
			return i
		}
	}
	return -1
}

// Get reads the staged write of key if there is one, else the base.
func (o *Overlay) Get(key []byte) ([]byte, bool, error) {
	if i := o.find(key); i >= 0 {
		w := o.writes[i]
		return w.Val, !w.Deleted, nil
	}
	return o.base.Get(key)
}

func (o *Overlay) put(w Write) {
	if i := o.find(w.Key); i >= 0 {
		o.writes[i] = w
		return
	}
	o.writes = append(o.writes, w)
}

// Set stages key = val. Like state.Txn, the Overlay keeps key and val: the
// caller must not modify them after.
func (o *Overlay) Set(key, val []byte) { o.put(Write{Key: key, Val: val}) }

// Delete stages the deletion of key.
func (o *Overlay) Delete(key []byte) { o.put(Write{Key: key, Deleted: true}) }

// Writes returns the staged writes, one per key, in the order each key was
// first written. The slice is the Overlay's own: valid until the next write
// or Flush.
func (o *Overlay) Writes() []Write { return o.writes }

// Scan merges the staged writes into the base's view, in key order.
func (o *Overlay) Scan(prefix []byte, fn func(key, value []byte) error) error {
	var mine []Write
	for _, w := range o.writes {
		if bytes.HasPrefix(w.Key, prefix) {
			mine = append(mine, w)
		}
	}
	if len(mine) == 0 {
		return o.base.Scan(prefix, fn)
	}
	type kv struct{ k, v []byte }
	var all []kv
	if err := o.base.Scan(prefix, func(k, v []byte) error {
		all = append(all, kv{bytes.Clone(k), bytes.Clone(v)})
		return nil
	}); err != nil {
		return err
	}
	for _, w := range mine {
		i := sort.Search(len(all), func(i int) bool { return bytes.Compare(all[i].k, w.Key) >= 0 })
		found := i < len(all) && bytes.Equal(all[i].k, w.Key)
		switch {
		case w.Deleted && found:
			all = append(all[:i], all[i+1:]...)
		case w.Deleted:
		case found:
			all[i].v = w.Val
		default:
			all = append(all, kv{})
			copy(all[i+1:], all[i:])
			all[i] = kv{w.Key, w.Val}
		}
	}
	for _, e := range all {
		if err := fn(e.k, e.v); err != nil {
			return err
		}
	}
	return nil
}

// Flush writes the staged writes into the base, in order, and empties the
// Overlay. A staged deletion needs a base with a Delete method.
func (o *Overlay) Flush() {
	for _, w := range o.writes {
		if w.Deleted {
			o.base.(deleter).Delete(w.Key)
		} else {
			o.base.Set(w.Key, w.Val)
		}
	}
	o.writes = o.writes[:0]
}

// ReadOnly is the committed state of a store (Pebble, no transaction's
// staged writes) as a KV for reads outside a transaction, such as the
// executor's ledger views. A write is a bug and panics.
type ReadOnly struct{ Store *state.Store }

// Get reads the committed value of key.
func (r ReadOnly) Get(key []byte) ([]byte, bool, error) { return r.Store.Get(key) }

// Scan reads the committed keys with prefix, in key order.
func (r ReadOnly) Scan(prefix []byte, fn func(key, value []byte) error) error {
	return r.Store.Scan(prefix, fn)
}

// Set panics: ReadOnly is for reads.
func (ReadOnly) Set(_, _ []byte) { panic("staging: write to a ReadOnly store") }
