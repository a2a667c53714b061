// Package rebuild replays a projection's input from history into a new
// projection topic while the live worker keeps running, and compares two
// projection topics key by key (Diff) so that an operator can check a rebuild
// before cutting readers over.
//
// Invariants (named in docs/design.md#invariants where they have a name):
//
//   - no-effects-in-rebuild: a rebuild never calls out. It runs the processor
//     in processor.Rebuild mode and never starts the side-effect executor.
//     The configured side-effect rules are still evaluated, so every intent
//     the live worker would have produced is counted as suppressed (in the
//     processor's stats, the projector_side_effects_total{status="suppressed"}
//     series and the summary) and none is produced.
//   - rebuild-equals-live: a rebuild shares nothing writable with the live
//     worker: its consumer group, transactional-id prefix and changelog
//     topics follow Group(name, topic) = "<name>-rebuild-<topic>", its Pebble
//     state lives in StateDir(cfg, topic) = "<state.dir>/rebuild-<topic>",
//     and its dead letters go to "<topic>.dlq" unless told otherwise. The
//     processor name (the dedup scope) stays the live one, so the rebuilt
//     projection of the same input equals the live one, key for key.
//   - The target is fixed at start: the input's end offsets (last stable
//     offsets, what a read_committed consumer can reach) are captured before
//     the processor starts, and the rebuild is complete when the group's
//     committed offsets reach them. Records produced after the start are left
//     for the next run.
//   - Stop and resume: a rebuild stopped by its context (SIGTERM/SIGINT)
//     finishes or aborts its open transaction and returns a Result with
//     Completed false; a crash leaves at most an open transaction that the next
//     run's transactional id aborts. Running again with the same topic reuses
//     the group (its committed offsets) and the state directory (restored from
//     the changelog where it is behind) and continues; its end offsets are
//     captured again at its own start, and its Result counts only its own
//     work.
package rebuild
