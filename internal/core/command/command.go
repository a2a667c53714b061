// Package command holds what the processor and the executor share about
// command records: the header that marks a record on the input or effects
// topic as a command rather than an event or an intent, the decoding of its
// JSON value with the error a command that cannot apply is dead-lettered
// with, and the dead-letter reason of a value that cannot be read.
//
// Each topic keeps its own command type (processor.Command: skip-gap;
// sideeffects.Command: resolve, outcome and withdraw): their JSON members differ, and
// operators' tools write them as they are (docs/operations.md).
package command

import (
	"encoding/json"
	"fmt"

	"github.com/projector-dev/projector/internal/core/eos"
)

// Header marks a record that is a command, not an event (input topic) or an
// intent (effects topic). Its value names the op; the record's value is the
// command as JSON, and its key routes it to the partition that owns what it
// acts on, so the owner applies it inside its own transaction, in order with
// the records around it.
const Header = "projector-command"

// ReasonInvalidValue is the dead-letter reason (header projector-reason) of a
// record whose value cannot be read: an event that is not an envelope, an
// intent that does not parse, a command that does not decode or cannot
// apply.
const ReasonInvalidValue = "invalid:value"

// maxQuoted bounds how much of a bad command's value its error quotes: the
// error becomes the dead letter's projector-error header, which must stay
// small whatever the value (docs/reliability.md,
// TestCommandHugeNonJSONValueDeadLettered).
const maxQuoted = 256

// Command is a command type: Valid reports whether a decoded value names an
// op the consumer knows, with the members that op needs.
type Command interface {
	Valid() bool
}

// Error is a command value that does not decode, or decodes to a command
// that is not Valid.
type Error struct {
	Value []byte
	// Err is why the value does not decode (a JSON error); nil when it
	// decodes to a command that is not Valid.
	Err error
}

// Error quotes the value and says what is wrong with it, each cut to
// maxQuoted bytes.
func (e *Error) Error() string {
	why := "no op this topic takes, or a member it needs is missing"
	if e.Err != nil {
		why = string(eos.Truncate([]byte(e.Err.Error()), maxQuoted))
	}
	return fmt.Sprintf("bad operator command %q: %s", eos.Truncate(e.Value, maxQuoted), why)
}

func (e *Error) Unwrap() error { return e.Err }

// Decode unmarshals value into c (a pointer to the command type) and checks
// it; a value that is not JSON of c's shape, or not Valid, is an *Error.
func Decode(value []byte, c Command) error {
	if err := json.Unmarshal(value, c); err != nil {
		return &Error{Value: value, Err: err}
	}
	if !c.Valid() {
		return &Error{Value: value}
	}
	return nil
}
