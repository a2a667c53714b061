package sideeffects_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/command"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/sideeffects"
	"github.com/projector-dev/projector/sideeffects/effect"
	"github.com/projector-dev/projector/sideeffects/webhook"
)

// badRecord is one record on the effects topic that must be dead-lettered
// invalid:value, with an error that contains why.
type badRecord struct {
	name    string
	key     string
	command bool // with the projector-command header
	value   string
	why     string
}

// intentValue is the value of an intent for key and effect, as the
// processor produces it (its members in the contract's order).
func intentValue(key, eff string) string {
	return fmt.Sprintf(`{"key":%q,"effect":%q,"projection":"p","aggregateId":"A","aggregateVersion":1,"eventId":"e-%s","event":{}}`, key, eff, key)
}

// TestExecutorBadRecordsDeadLettered: issue 22's outcome command that
// stopped the executor (Settle refused "in-flight" with a plain error and
// the loop exited), then a table of other commands, reports and intents
// that are malformed or cannot apply, then a valid intent, all on one
// partition of the effects topic of a running worker. Each bad record is
// dead-lettered invalid:value with an error naming the problem, the worker
// never exits, and the valid intent's call happens
// (docs/design.md#nothing-dropped-silently).
func TestExecutorBadRecordsDeadLettered(t *testing.T) {
	const topic, dlq = "fx.effects", "fx.dlq"
	_, brokers := testkit.Broker(t, 1, topic)
	rc := newReceiver(t)
	st, err := state.Open(filepath.Join(t.TempDir(), "w1"), state.Options{CacheBytes: 1 << 20, MemTableBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	w, err := sideeffects.NewWorker(withStore(st, sideeffects.WorkerConfig{
		Session:      sideeffects.Session{Name: "fx", InstanceID: "w1", Brokers: brokers, DeadLetterTopic: dlq, Partitions: 1, TransactionTimeout: 10 * time.Second, SessionTimeout: 6 * time.Second, Logger: fxLogger()},
		EffectsTopic: topic,
		Effects:      map[string]sideeffects.Effect{"fx": {Caller: &webhook.Client{URL: rc.srv.URL, Timeout: 10 * time.Second}}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	bad := badEffectsRecords()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produce := func(key string, cmd bool, value string) int64 {
		t.Helper()
		r := &kgo.Record{Value: []byte(value)}
		if key != "" {
			r.Key = []byte(key)
		}
		if cmd {
			r.Headers = []kgo.RecordHeader{{Key: sideeffects.HeaderCommand, Value: []byte("1")}}
		}
		res, err := cl.ProduceSync(context.Background(), r).First()
		if err != nil {
			t.Fatal(err)
		}
		return res.Offset
	}
	produce("idle", false, intentValue("idle", "not-executed-here"))
	byOffset := map[int64]badRecord{}
	for _, b := range bad {
		byOffset[produce(b.key, b.command, b.value)] = b
	}
	produce("k-valid", false, intentValue("k-valid", "fx"))

	exited := func() {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the worker exited: %v", err)
		default:
		}
	}
	var dls []testkit.DeadLetter
	testkit.Await(t, time.Minute, "the valid intent's call and every dead letter", func() bool {
		exited()
		if req, _ := rc.counts(); req["k-valid"] == 0 || w.Stats().Effects("fx", effect.Succeeded) == 0 {
			return false
		}
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer rcancel()
		recs, err := testkit.ReadAll(rctx, brokers, dlq)
		if err != nil {
			return false
		}
		dls = testkit.DeadLetters(recs)
		return len(dls) >= len(bad)
	})
	seen := checkBadDeadLetters(t, topic, dls, byOffset)
	if n := w.Stats().Effects("fx", effect.Succeeded); n != 1 {
		t.Errorf("%d keys succeeded, want 1 (k-valid)", n)
	}
	// Well-formed reports of an attempt whose outcome the ledger has
	// recorded already are stale, not bad: counted, not dead-lettered.
	produce("k-valid", true, `{"op":"outcome","as":"failed","attempt":1,"result":{"statusCode":500}}`)
	produce("k-valid", true, `{"op":"withdraw","attempt":1,"start":"2026-01-01T00:00:00Z"}`)
	testkit.Await(t, time.Minute, "the stale reports", func() bool {
		exited()
		return w.Stats().StaleReports("fx") == 2
	})
	rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer rcancel()
	if recs, err := testkit.ReadAll(rctx, brokers, dlq); err != nil || len(recs) != len(bad) {
		t.Errorf("dead letters after the stale report: %d (%v), want %d", len(recs), err, len(bad))
	}
	exited()
	t.Logf("%d bad records dead-lettered invalid:value, each naming its problem; the worker kept running and called k-valid", len(seen))
}

// badEffectsRecords are records of the effects topic that the executor must
// dead-letter. "idle" is a pending key of an effect the test's worker does
// not execute: its entry stays pending, never started, for the commands
// that need one.
func badEffectsRecords() []badRecord {
	return []badRecord{
		{name: "issue 22: outcome as in-flight", key: "idle", command: true,
			value: `{"op":"outcome","as":"in-flight","attempt":1,"result":{}}`, why: "as in-flight is not an outcome"},
		{name: "outcome without attempt", key: "idle", command: true,
			value: `{"op":"outcome","as":"succeeded","result":{}}`, why: "attempt must be 1 or more"},
		{name: "outcome without result", key: "idle", command: true,
			value: `{"op":"outcome","as":"succeeded","attempt":1}`, why: "result is missing"},
		{name: "outcome as an unknown status", key: "idle", command: true,
			value: `{"op":"outcome","as":"done","attempt":1,"result":{}}`, why: `as "done" is not a status`},
		{name: "outcome that does not lead to its status", key: "idle", command: true,
			value: `{"op":"outcome","as":"succeeded","attempt":1,"result":{"outcome":"unknown"}}`, why: "result.outcome unknown does not lead to succeeded"},
		{name: "outcome with a status code that is no HTTP status", key: "idle", command: true,
			value: `{"op":"outcome","as":"failed","attempt":1,"result":{"statusCode":42}}`, why: "result.statusCode 42 is not an HTTP status"},
		{name: "outcome with a negative duration", key: "idle", command: true,
			value: `{"op":"outcome","as":"failed","attempt":1,"result":{"duration":-5}}`, why: "is negative"},
		{name: "outcome of another attempt than its result's", key: "idle", command: true,
			value: `{"op":"outcome","as":"failed","attempt":3,"result":{"n":2}}`, why: "result.n 2 is not attempt 3"},
		{name: "final outcome with a next attempt", key: "idle", command: true,
			value: `{"op":"outcome","as":"succeeded","attempt":1,"result":{},"next":"2026-01-01T00:00:00Z"}`, why: "next is set for the final status succeeded"},
		{name: "retry in a thousand years", key: "idle", command: true,
			value: `{"op":"outcome","as":"pending","attempt":1,"result":{},"next":"2999-01-01T00:00:00Z"}`, why: "further away than the longest backoff"},
		{name: "outcome with a note", key: "idle", command: true,
			value: `{"op":"outcome","as":"failed","attempt":1,"result":{},"note":"x"}`, why: "note belongs to a resolve command"},
		{name: "outcome of a key the ledger does not hold", key: "nobody", command: true,
			value: `{"op":"outcome","as":"succeeded","attempt":1,"result":{}}`, why: "no ledger entry"},
		{name: "outcome of an attempt never started", key: "idle", command: true,
			value: `{"op":"outcome","as":"succeeded","attempt":1,"result":{}}`, why: "settle attempt 1 (the last is 0)"},
		{name: "resolve as pending", key: "idle", command: true,
			value: `{"op":"resolve","as":"pending"}`, why: "as must be succeeded or failed, got pending"},
		{name: "resolve with an attempt", key: "idle", command: true,
			value: `{"op":"resolve","as":"succeeded","attempt":1}`, why: "belong to an executor's report"},
		{name: "resolve of a pending key", key: "idle", command: true,
			value: `{"op":"resolve","as":"failed","note":"no"}`, why: "resolve is not allowed from pending"},
		{name: "resolve of a key the ledger does not hold", key: "nobody", command: true,
			value: `{"op":"resolve","as":"failed"}`, why: "no ledger entry"},
		{name: "outcome with a start", key: "idle", command: true,
			value: `{"op":"outcome","as":"failed","attempt":1,"result":{},"start":"2026-01-01T00:00:00Z"}`, why: "start belongs to a withdrawal report"},
		{name: "withdrawal without start", key: "idle", command: true,
			value: `{"op":"withdraw","attempt":1}`, why: "withdrawal report: start is missing"},
		{name: "withdrawal without attempt", key: "idle", command: true,
			value: `{"op":"withdraw","start":"2026-01-01T00:00:00Z"}`, why: "attempt must be 1 or more, got 0"},
		{name: "withdrawal with a result", key: "idle", command: true,
			value: `{"op":"withdraw","attempt":1,"start":"2026-01-01T00:00:00Z","result":{}}`, why: "result and note belong to other commands"},
		{name: "withdrawal as failed", key: "idle", command: true,
			value: `{"op":"withdraw","as":"failed","attempt":1,"start":"2026-01-01T00:00:00Z"}`, why: "a withdrawn attempt leaves its key pending"},
		{name: "withdrawal due in a thousand years", key: "idle", command: true,
			value: `{"op":"withdraw","attempt":1,"start":"2026-01-01T00:00:00Z","next":"2999-01-01T00:00:00Z"}`, why: "further away than the longest backoff"},
		{name: "withdrawal of a key the ledger does not hold", key: "nobody", command: true,
			value: `{"op":"withdraw","attempt":1,"start":"2026-01-01T00:00:00Z"}`, why: "no ledger entry"},
		{name: "withdrawal of an attempt never started", key: "idle", command: true,
			value: `{"op":"withdraw","attempt":2,"start":"2026-01-01T00:00:00Z"}`, why: "withdraw attempt 2 started 2026-01-01T00:00:00Z (the last is 0)"},
		{name: "unknown op", key: "idle", command: true, value: `{"op":"explode"}`, why: "no op this topic takes"},
		{name: "truncated command", key: "idle", command: true, value: `{"op":"outcome","as":`, why: "unexpected end of JSON input"},
		{name: "attempt of the wrong type", key: "idle", command: true,
			value: `{"op":"outcome","as":"succeeded","attempt":"1","result":{}}`, why: "Command.attempt of type int"},
		{name: "result outcome that is no outcome", key: "idle", command: true,
			value: `{"op":"outcome","as":"succeeded","attempt":1,"result":{"outcome":"maybe"}}`, why: `unknown outcome "maybe"`},
		{name: "command of an empty key", key: "", command: true,
			value: `{"op":"resolve","as":"failed"}`, why: "no ledger entry"},
		{name: "intent that is not JSON", key: "k-x", value: `<html>`, why: "invalid intent value"},
		{name: "truncated intent", key: "k-x", value: `{"key":"k-x","effect":"fx","event":`, why: "invalid intent value"},
		{name: "intent without key", key: "k-x", value: `{"effect":"fx"}`, why: "key is missing or empty"},
		{name: "intent without effect", key: "k-x", value: `{"key":"k-x"}`, why: "effect is missing or empty"},
		{name: "intent with a key of the wrong type", key: "k-x", value: `{"key":7,"effect":"fx"}`, why: "invalid intent value"},
		{name: "intent under another record key", key: "k-y", value: intentValue("k-x", "fx"), why: `intent key "k-x" is not the record's key "k-y"`},
		{name: "intent without a record key", key: "", value: intentValue("k-x", "fx"), why: `intent key "k-x" is not the record's key ""`},
	}
}

// checkBadDeadLetters checks that each record of byOffset (by its offset on
// partition 0 of topic) was dead-lettered once, invalid:value, with an
// error naming its problem, and nothing else was; it returns the offsets
// dead-lettered.
func checkBadDeadLetters(t *testing.T, topic string, dls []testkit.DeadLetter, byOffset map[int64]badRecord) map[int64]bool {
	t.Helper()
	seen := map[int64]bool{}
	for _, d := range dls {
		var off int64
		if _, err := fmt.Sscanf(d.Source, topic+"/0/%d", &off); err != nil {
			t.Errorf("dead letter with source %q: %v", d.Source, err)
			continue
		}
		b, ok := byOffset[off]
		switch {
		case !ok:
			t.Errorf("unexpected dead letter of offset %d: %q (%s: %s)", off, d.Value, d.Reason, d.Error)
		case seen[off]:
			t.Errorf("%s: dead-lettered twice", b.name)
		case d.Reason != command.ReasonInvalidValue || !strings.Contains(d.Error, b.why):
			t.Errorf("%s: dead letter %s %q, want %s naming %q", b.name, d.Reason, d.Error, command.ReasonInvalidValue, b.why)
		}
		seen[off] = true
	}
	for off, b := range byOffset {
		if !seen[off] {
			t.Errorf("%s: not dead-lettered", b.name)
		}
	}
	return seen
}
