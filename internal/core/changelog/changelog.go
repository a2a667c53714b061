// Package changelog names the changelog topics of the exactly-once loop's
// users (internal/core/eos Config.ChangelogOf): one per input topic, per consumer
// group. The processor and the executor name theirs here, and the operator
// tools find them by the same name. CorruptError is the one error a record
// can stop a partition with: a changelog record the restore cannot read
// (docs/contract.md#corrupt-changelog-records).
package changelog

import "fmt"

// Topic names the changelog of input under group: "group.input.changelog".
func Topic(group, input string) string { return group + "." + input + ".changelog" }

// CorruptError is a changelog record that the restore of a task cannot read:
// the worker's own state is bad, so the restore stops there rather than
// restore a partition without it. It names the record, so that an operator
// can look at it, and says what the worker does.
type CorruptError struct {
	Task      string // the input partition restored, "topic/partition"
	Topic     string // the changelog topic
	Partition int32
	Offset    int64
	Key       []byte
	Err       error // why the record cannot be read
}

// maxKeyQuoted bounds how much of the record's key the error quotes.
const maxKeyQuoted = 64

func (e *CorruptError) Error() string {
	key := e.Key
	if len(key) > maxKeyQuoted {
		key = key[:maxKeyQuoted]
	}
	return fmt.Sprintf("changelog: corrupt record in %s, partition %d, offset %d (key %q, restoring %s): %v; "+
		"the partition's state cannot be restored past it, so the worker stops, as will any instance the partition moves to; "+
		"inspect the record with kcat -C -b BROKER -t %s -p %d -o %d -c 1 -X isolation.level=read_committed, "+
		"and see docs/contract.md#corrupt-changelog-records for what to do",
		e.Topic, e.Partition, e.Offset, key, e.Task, e.Err, e.Topic, e.Partition, e.Offset)
}

func (e *CorruptError) Unwrap() error { return e.Err }
