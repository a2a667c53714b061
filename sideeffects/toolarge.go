package sideeffects

import (
	"fmt"

	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// ReasonTooLarge dead-letters an intent whose ledger entry could outgrow
// the record limit (the processor's reason for an event whose outputs
// would, processor.ReasonTooLarge).
const ReasonTooLarge = "too-large"

// clientBatchBytes is the producer's batch limit when MaxRecordBytes is 0
// (kgo's default, Kafka's default max.message.bytes).
const clientBatchBytes = 1_000_012

// tooLarge says why the ledger cannot take the intent ("" when it can): its
// entry, with the most history and the longest texts it can carry, could
// exceed the record limit, and a changelog record the broker refuses would
// stop the executor at every restart (issue 22). The processor refuses such
// an intent before producing it; this catches one that did not come
// through that check (written by an older version, or by hand).
func (w *Worker) tooLarge(in effect.Intent) string {
	limit, name := w.cfg.MaxRecordBytes, "kafka.maxRecordBytes"
	if limit <= 0 {
		limit, name = clientBatchBytes, "the producer's default batch limit"
	}
	n := effect.MaxRecordBytes(in.Key, in.Effect, len(in.Value)) + eos.RecordOverhead
	if n <= limit {
		return ""
	}
	return fmt.Sprintf("the ledger entry of this intent could grow to %d bytes with its attempt history, over %s %d", n, name, limit)
}
