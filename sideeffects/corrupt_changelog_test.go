package sideeffects_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/changelog"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/sideeffects"
)

// TestCorruptLedgerRecordStopsRestore: a corrupt record in the ledger's
// changelog stops the restore of a new owner with an error naming the
// changelog topic, partition and offset (changelog.CorruptError,
// docs/contract.md#corrupt-changelog-records) – for a value that is not an
// entry, and for an entry filed under another key. Before, the restore went
// past it silently; the partition's Runner then stopped at Recover with a
// bare "corrupt ledger entry", naming no record, while the worker stayed
// ready and the partition's keys were never called.
func TestCorruptLedgerRecordStopsRestore(t *testing.T) {
	for _, tc := range []struct {
		name       string
		key, value string
	}{
		{"not an entry", "ek-bad", "\x01{not json"},
		{"another key's entry", "ek-other", "\x01" + `{"key":"k-else","effect":"notify","status":"pending","attempts":0,"created":"2026-01-01T00:00:00Z","updated":"2026-01-01T00:00:00Z","intent":{}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, brokers, keys := fxSetup(t, 4)
			rc := newFxReceiver(t, 0, nil)
			dir := t.TempDir()
			opts := func(id string) fxOpts {
				return fxOpts{brokers: brokers, id: id, url: rc.url(id), dir: dir, webhookTimeout: 2 * time.Second, workers: 2}
			}
			a := startFxWorker(t, opts("a"))
			testkit.Await(t, 30*time.Second, "a to succeed every key", func() bool { return a.succeeded() == len(keys) })
			if err := a.stop(t); err != nil {
				t.Fatal(err)
			}
			topic := sideeffects.ChangelogTopic(fxName, fxEffects)
			bad := &kgo.Record{Topic: topic, Partition: 0, Key: []byte(tc.key), Value: []byte(tc.value)}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := testkit.ProduceRecords(ctx, brokers, 1<<20, bad); err != nil {
				t.Fatal(err)
			}
			// A new instance with its own state directory restores from 0.
			b := startFxWorker(t, opts("b"))
			testkit.Await(t, 30*time.Second, "b's Run to return", func() bool {
				return b.returned() || b.w.Stats().Ready()
			})
			if !b.returned() {
				t.Fatalf("b is ready: the restore went past the corrupt record at offset %d", bad.Offset)
			}
			var ce *changelog.CorruptError
			if !errors.As(b.err, &ce) || ce.Topic != topic || ce.Partition != 0 || ce.Offset != bad.Offset {
				t.Fatalf("Run: %v\nwant a *changelog.CorruptError at %s/0/%d", b.err, topic, bad.Offset)
			}
			for _, want := range []string{topic, "partition 0", fmt.Sprintf("offset %d", bad.Offset), "kcat"} {
				if !strings.Contains(b.err.Error(), want) {
					t.Errorf("the error does not say %q:\n%v", want, b.err)
				}
			}
			t.Logf("%s: %v", tc.name, b.err)
		})
	}
}
