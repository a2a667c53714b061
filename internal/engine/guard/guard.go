package guard

import (
	"fmt"
	"time"

	"github.com/projector-dev/projector/projection"
)

// Outcome is the guard's verdict on one offered event.
type Outcome uint8

const (
	Applied Outcome = iota
	Stale
	Held
	// Failed: the handler returned an error; the event is dead-lettered and
	// the guard did not advance.
	Failed
	// Overflow: the aggregate already holds the maximum number of events; the
	// event is dead-lettered instead of held.
	Overflow
)

func (o Outcome) String() string {
	return [...]string{"applied", "stale", "held", "failed", "overflow"}[o]
}

// KV is the staged state the guard reads and writes (a *state.Txn).
type KV interface {
	Get(key []byte) ([]byte, bool, error)
	Set(key, val []byte)
	Delete(key []byte)
	Scan(prefix []byte, fn func(key, value []byte) error) error
}

// Change is one application of an event to an aggregate: the processor emits
// one projection record per Change.
type Change struct {
	Event   *projection.Event // as the handler saw it
	Source  Source
	Version int64
	State   []byte // nil when Deleted
	Deleted bool
	Effects []projection.Intent
}

// Failure is an event the handler rejected (or a held event that could not be
// re-read); the processor dead-letters it.
type Failure struct {
	Source Source
	Err    error
}

// Step is everything one Offer (or Expire) did.
type Step struct {
	Outcome  Outcome
	Changes  []Change  // in version order; drained held events follow the offered one
	Failures []Failure // dead-letter these with reason handler-error
	Dropped  []Source  // dead-letter these with reason gap-timeout
	// Gap is the aggregate's gap after the step: HeldCount events wait since
	// HeldSince (zero when none wait). HeldBefore is how many waited before
	// it: a step with both zero cannot have opened, moved or closed a gap.
	HeldCount  int64
	HeldSince  time.Time
	HeldBefore int64
}

// Guard applies one projection's events to aggregate state through a KV.
type Guard struct {
	P       *projection.Projection
	MaxHeld int64
	// MaxRecordBytes is the envelope size limit used when held events are
	// decoded again (0: the envelope default); it must match the limit the
	// processor accepted them under.
	MaxRecordBytes int
	// InlineHeldBytes bounds the held event an aggregate record may carry
	// inline (its stored wrapper; 0: DefaultInlineHeld, negative: none).
	InlineHeldBytes int
}

// DefaultInlineHeld is the largest held event (stored wrapper) an aggregate
// record carries inline. An aggregate's first held event goes into its
// record, which is written anyway (the held count changes), instead of a key
// of its own: a stream of events that each open a gap then costs one state
// write per event, as in-order events do, not two. Larger events, and any
// held while the slot is taken, get a key of their own; the slot is kept
// small because the record is rewritten with every later event of the
// aggregate until the event drains.
const DefaultInlineHeld = 4 << 10

// maxInlineRecord is the largest aggregate record (state and inline event)
// that takes an inline held event: a large state is rewritten with it.
const maxInlineRecord = 64 << 10

// inlineLimit is InlineHeldBytes with its default applied.
func (g *Guard) inlineLimit() int {
	if g.InlineHeldBytes == 0 {
		return DefaultInlineHeld
	}
	return g.InlineHeldBytes
}

// load reads and decodes the aggregate record under key; a missing record
// is the zero state (version 0, nothing held).
func (g *Guard) load(kv KV, key []byte) (aggState, error) {
	v, ok, err := kv.Get(key)
	if err != nil || !ok {
		return aggState{}, err
	}
	s, err := decodeAgg(v)
	if err != nil {
		return s, fmt.Errorf("projection %s: %w", g.P.Name, err)
	}
	return s, nil
}
