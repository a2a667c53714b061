// Package eos is projector's exactly-once consume-process-produce loop, shared
// by the event processor and the side-effect executor. It owns the Kafka
// session, the restore of state from changelogs, and the order of a
// transaction's steps; a Handler decides what each record means.
//
// Invariants (named in docs/design.md#invariants):
//
//   - behind-kafka: Pebble is never ahead of Kafka: a transaction's state is
//     staged in a state.Txn and written to Pebble, synced, only after End
//     reports committed. Every other End result discards the staged writes,
//     and the Batch's commit hooks (counters, in-memory indexes, wake-ups)
//     run only after the Pebble write.
//   - changelog-closes-gap: Pebble may be behind Kafka; every staged write
//     below a task prefix is produced to the task's changelog partition in
//     the same transaction. A task is restored from its stored changelog
//     offset to the partition's last stable offset on assignment, and again
//     once the group has fetched the task's committed offsets (by then any
//     transaction of a previous owner has resolved), before its records are
//     processed. A store that last matched its changelog longer ago than the
//     changelog's delete.retention.ms (or at an unknown time), and has
//     records to read, is restored from offset 0 instead: compaction may
//     have removed tombstones it never saw (docs/decisions/007).
//   - fencing-is-fatal: the transactional id is stable per instance; an End
//     error (fenced, or any other: none is retryable) stops Run. A fencing
//     – of the producer or of the static group member – stops it with a
//     FencedError that names a live twin (another process running with the
//     instance id) when the group or the timing says so.
//
// A transaction has one Batch and one state.Txn per task; each task's state
// is one Pebble batch with its changelog offset (docs/decisions/004).
//
// Before it joins its group, Run checks the Kafka permissions it needs
// (access.go: the group, the inputs, changelogs and outputs) and stops with
// an acl.DeniedError naming every missing one; a changelog's unreadable
// delete.retention.ms is such an error too, never guessed
// (docs/operations.md#kafka-acls).
//
// Goroutines: Run owns the loop and every client it creates. kgo's group
// callbacks only record assignment changes under a mutex; the loop acts on
// them between transactions. The Handler makes one TaskHandler per owned
// task (NewTask, on assignment, before the task's first restore) and the
// loop calls it for that task alone: Restored after each restore, Process
// per record, Stage once per batch, Revoked at the end. Handler and
// TaskHandler methods are called from the loop, except TaskHandler.Process,
// Stage and Restored with Config.Parallel: then each task's records are
// processed, its batch staged and its restored state taken up, on one of
// up to GOMAXPROCS goroutines, never two tasks' records sharing a Batch or a
// TaskHandler (a Handler that is an AfterRestorer then does its loop-wide
// work after a restore on the loop). The standby replica (standby.go) reads
// the changelogs of tasks the loop does not own on its own goroutine and
// client. With Config.AsyncCommit a goroutine writes the committed transaction to
// Pebble (reading its txns only) while the loop goes on; the loop runs the
// hooks once the write has landed.
package eos
