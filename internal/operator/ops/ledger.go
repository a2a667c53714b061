package ops

// The executor's side of ops-through-kafka: its ledger read from the
// changelog, and the resolve command sent to the partition that owns a key.
// Only operator tools (projector effects, the demo, the soak) use them; the
// executor itself reads its ledger from its store.

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/jsonenc"
	"github.com/projector-dev/projector/internal/core/topicread"
	"github.com/projector-dev/projector/sideeffects"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// ReadLedger reads the ledger of every effects-topic partition from its
// changelog (read_committed, up to the end at the time of the call): the
// running executor holds its Pebble store, and the changelog is the truth
// anyway. Entries come back sorted by key.
func ReadLedger(ctx context.Context, opts []kgo.Opt, name, effectsTopic string) ([]effect.Entry, error) {
	topic := sideeffects.ChangelogTopic(name, effectsTopic)
	latest := map[string][]byte{}
	err := topicread.Committed(ctx, opts, topic, func(r *kgo.Record) {
		if len(r.Key) > 0 && r.Key[0] == effect.KeyPrefix {
			latest[string(r.Key[1:])] = r.Value
		}
	})
	if err != nil && !errors.Is(err, topicread.ErrNoTopic) {
		return nil, fmt.Errorf("ops: ledger changelog %s: %w", topic, err)
	}
	out := make([]effect.Entry, 0, len(latest))
	for k, v := range latest {
		if v == nil {
			continue
		}
		e, err := effect.DecodeEntry(v)
		if err != nil {
			return nil, fmt.Errorf("ops: ledger entry %q: %w", k, err)
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// SendResolve asks the executor to settle an unknown key: a command record
// on the effects topic, keyed by the idempotency key so that it reaches the
// partition (and so the executor) that owns the key's ledger entry, where it
// is applied inside that executor's transaction.
func SendResolve(ctx context.Context, opts []kgo.Opt, effectsTopic, key string, as effect.Status, note string) error {
	if as != effect.Succeeded && as != effect.Failed {
		return fmt.Errorf("ops: resolve as %s: want succeeded or failed", as)
	}
	// The note as the ledger keeps it (cut to effect.MaxNoteBytes), so that
	// the command record stays small; no HTML escaping (jsonenc).
	v, _ := jsonenc.Marshal(sideeffects.Command{Op: sideeffects.OpResolve, As: as.String(), Note: effect.BoundText(note, effect.MaxNoteBytes)})
	cl, err := kgo.NewClient(append(append([]kgo.Opt(nil), opts...), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))...)
	if err != nil {
		return err
	}
	defer cl.Close()
	r := &kgo.Record{Topic: effectsTopic, Key: []byte(key), Value: v,
		Headers: []kgo.RecordHeader{{Key: sideeffects.HeaderCommand, Value: []byte(sideeffects.OpResolve)}}}
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return fmt.Errorf("ops: send resolve for %q: %w", key, commandDenied(err, effectsTopic))
	}
	return nil
}
