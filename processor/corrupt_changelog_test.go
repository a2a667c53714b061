package processor_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/changelog"
	"github.com/projector-dev/projector/internal/engine/guard"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/processor"
)

// TestCorruptChangelogRecordStopsRestore: the one record allowed to stop a
// partition is a corrupt record on its changelog – the worker's own state
// (docs/contract.md#corrupt-changelog-records). A worker applies a few
// events and stops; a record no worker writes is then produced to the
// changelog, one kind per case; a worker with an empty state directory
// restores the partition. Its restore must fail – not panic, not skip the
// record and go on – with a *changelog.CorruptError naming the changelog
// topic, partition and offset and telling the operator how to look at the
// record. Before the fix: a dedup segment failed with an error naming the
// input partition only; an aggregate record, a held event and a dedup entry
// were restored as they were (the worker stopped later, on the first event
// of that aggregate or id, or never); an aggregate key with a huge length
// panicked the restore.
func TestCorruptChangelogRecordStopsRestore(t *testing.T) {
	t.Parallel() // five short workers that mostly wait (group joins, restores)
	aggKey := func(proj, agg string) []byte { return guard.AggregateKey(nil, proj, agg) }
	for _, tc := range []struct {
		name       string
		key, value []byte
	}{
		{"dedup segment", append([]byte{'D'}, make([]byte, 16)...), []byte{1, 2, 3}},
		{"dedup entry", append([]byte{'d'}, make([]byte, 16)...), []byte("short")},
		{"aggregate record", aggKey("case-overview", "A-1"), []byte{9, 9, 9}},
		// format 1, version 1, no flags, one held event since 1 ms: a record
		// that decodes, under a key whose projection length overflows.
		{"aggregate key", binary.AppendUvarint([]byte{guard.KindAggregate}, 1<<63), []byte{1, 1, 0, 1, 2, '{', '}'}},
		{"held event", binary.BigEndian.AppendUint64(guard.HeldPrefix(nil, "case-overview", "H-1"), 9), []byte{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1)
			e.produce([]workload.Record{bigMerge("A-1", 1, 10), bigMerge("H-1", 2, 10), bigMerge("H-1", 3, 10)})
			in := e.start(instOpts{})
			e.waitCaughtUp(30 * time.Second)
			if err := in.stop(t); err != nil {
				t.Fatal(err)
			}
			topic := processor.ChangelogTopic(group, inputTopic)
			bad := &kgo.Record{Topic: topic, Partition: 0, Key: tc.key, Value: tc.value}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := testkit.ProduceRecords(ctx, e.brokers, 1<<20, bad); err != nil {
				t.Fatal(err)
			}
			// A fresh state directory restores the changelog from offset 0.
			in2 := e.start(instOpts{id: "w2", stateDir: filepath.Join(e.dir, "fresh")})
			var err error
			waitCtx, stopWait := context.WithTimeout(ctx, 30*time.Second)
			ready := make(chan error, 1)
			go func() { ready <- in2.p.WaitReady(waitCtx) }()
			var werr error
			select {
			case err = <-in2.done:
			case werr = <-ready:
				if werr == nil {
					werr = errors.New("ready")
				}
			}
			stopWait()
			if err == nil {
				in2.stop(t)
				t.Fatalf("the restore went past the corrupt record at offset %d (ready %v, %v): it was restored silently",
					bad.Offset, in2.p.Stats().Ready(), werr)
			}
			in2.store.Close()
			var ce *changelog.CorruptError
			if !errors.As(err, &ce) || ce.Topic != topic || ce.Partition != 0 || ce.Offset != bad.Offset {
				t.Fatalf("Run: %v\nwant a *changelog.CorruptError at %s/0/%d", err, topic, bad.Offset)
			}
			for _, want := range []string{topic, "partition 0", fmt.Sprintf("offset %d", bad.Offset), "kcat", "corrupt-changelog-records"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q:\n%v", want, err)
				}
			}
			t.Logf("%s: %v", tc.name, err)
		})
	}
}
