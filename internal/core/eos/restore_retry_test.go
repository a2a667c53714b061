package eos

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/app/broker"
	"github.com/projector-dev/projector/internal/core/state"
)

// restoreHandler records the tasks the loop restored; it processes nothing.
type restoreHandler struct {
	mu       sync.Mutex
	restored map[state.Task]int // Restored calls of a verified task
}

func (h *restoreHandler) NewTask(t *Task) *restoreTask { return &restoreTask{h: h, t: t} }
func (h *restoreHandler) Due(time.Time) bool           { return false }
func (h *restoreHandler) Begin(*Batch) error           { return nil }

// restoreTask is restoreHandler's TaskHandler.
type restoreTask struct {
	h *restoreHandler
	t *Task
}

func (rt *restoreTask) Restored() error {
	if rt.t.Verified() {
		rt.h.mu.Lock()
		rt.h.restored[rt.t.ID]++
		rt.h.mu.Unlock()
	}
	return nil
}
func (rt *restoreTask) Revoked()                          {}
func (rt *restoreTask) Process(*Batch, *kgo.Record) error { return nil }
func (rt *restoreTask) Stage(*Batch)                      {}

// TestRestoreRetriesTransientErrors: while a task restores its changelog,
// the broker answers the restore's ListOffsets or Fetch for the changelog
// with UNKNOWN_SERVER_ERROR a few times. The loop must not exit: it retries
// with backoff (Stats.RestoreRetries, projector_restore_retries_total),
// restores every changelog record, becomes ready, and stops cleanly.
// (Before fd42fd9 Run returned "eos: restore … UNKNOWN_SERVER_ERROR" and the
// worker exited 1.)
func TestRestoreRetriesTransientErrors(t *testing.T) {
	for _, key := range []kmsg.Key{kmsg.ListOffsets, kmsg.Fetch} {
		t.Run(key.Name(), func(t *testing.T) { testRestoreRetries(t, key) })
	}
}

func testRestoreRetries(t *testing.T, key kmsg.Key) {
	const (
		input     = "in"
		changelog = "in.changelog"
		records   = 500
		faults    = 3
	)
	c, err := broker.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, input, changelog))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The changelog of partition in/0 already holds state: a fresh store
	// must read all of it.
	pc, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(changelog),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	for i := range records {
		r := &kgo.Record{Key: fmt.Appendf(nil, "k%04d", i), Value: fmt.Appendf(nil, "v%d", i)}
		pc.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				t.Error(err)
			}
		})
	}
	if err := pc.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	details, err := kadm.NewClient(pc).ListTopics(ctx, changelog)
	if err != nil || details[changelog].Err != nil {
		t.Fatalf("list %s: %v %v", changelog, err, details[changelog].Err)
	}
	changelogID := details[changelog].ID

	// Answer the first requests for the changelog with UNKNOWN_SERVER_ERROR.
	var injected atomic.Int64
	c.ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if injected.Load() >= faults {
			return nil, nil, false
		}
		var resp kmsg.Response
		switch r := req.(type) {
		case *kmsg.ListOffsetsRequest:
			resp = listOffsetsError(r, changelog, kerr.UnknownServerError.Code)
		case *kmsg.FetchRequest:
			resp = fetchError(r, changelog, changelogID, kerr.UnknownServerError.Code)
		}
		if resp == nil {
			return nil, nil, false
		}
		injected.Add(1)
		return resp, nil, true
	})

	st, err := state.Open("mem", state.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h := &restoreHandler{restored: map[state.Task]int{}}
	stats := NewStats()
	l := New(Config{
		Group: "g", TransactionalID: "g-t1",
		Session: Session{InstanceID: "t1", Brokers: c.ListenAddrs(), DeadLetterTopic: "in.dlq", Partitions: 1,
			Store: st, MaxRecordsPerTxn: 100, TransactionTimeout: 10 * time.Second, SessionTimeout: 6 * time.Second},
		Inputs:       []string{input},
		ChangelogOf:  func(in string) string { return in + ".changelog" },
		CreateInputs: true,
		Stats:        stats,
	}, h)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l.Run(runCtx) }()

	ready := make(chan error, 1)
	go func() { ready <- stats.WaitReady(ctx) }()
	select {
	case err := <-done:
		t.Fatalf("Run returned while restoring (after %d injected errors): %v", injected.Load(), err)
	case err := <-ready:
		if err != nil {
			_, why := stats.Readiness()
			t.Fatalf("not ready: %s (%d errors injected)", why, injected.Load())
		}
	}
	if n := injected.Load(); n != faults {
		t.Fatalf("%d errors injected, want %d: the restore never met the fault", n, faults)
	}
	// At least one injected error reached the restore and was retried (the
	// client may itself absorb one, e.g. by retrying a fetch on its own, so
	// the count can be below the number injected under load).
	if got := stats.RestoreRetries(); got < 1 || got > faults {
		t.Errorf("RestoreRetries = %d after %d transient errors, want 1..%d", got, faults, faults)
	}
	task := state.Task{Topic: input, Partition: 0}
	if off, err := st.ChangelogOffset(task); err != nil || off != records {
		t.Errorf("changelog offset in the store: %d (%v), want %d", off, err, records)
	}
	for i := range records {
		v, ok, err := st.Get(append(task.Prefix(), fmt.Appendf(nil, "k%04d", i)...))
		if err != nil || !ok || string(v) != fmt.Sprintf("v%d", i) {
			t.Fatalf("key k%04d after the restore: %q %v %v", i, v, ok, err)
		}
	}
	if got := stats.Restored(); got != records {
		t.Errorf("restored-records counter %d, want %d (retries restore nothing twice)", got, records)
	}
	h.mu.Lock()
	if h.restored[task] == 0 {
		t.Error("the task was never verified")
	}
	h.mu.Unlock()
	// Still running: the errors did not stop the loop.
	select {
	case err := <-done:
		t.Fatalf("Run returned after the restore: %v", err)
	default:
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	t.Logf("%s: %d UNKNOWN_SERVER_ERROR answers, %d restore retries, %d records restored", key.Name(), faults, stats.RestoreRetries(), records)
}

// listOffsetsError answers a listing of topic alone with code on every
// partition; nil for any other listing.
func listOffsetsError(req *kmsg.ListOffsetsRequest, topic string, code int16) kmsg.Response {
	if len(req.Topics) != 1 || req.Topics[0].Topic != topic {
		return nil
	}
	resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
	st := kmsg.NewListOffsetsResponseTopic()
	st.Topic = topic
	for _, rp := range req.Topics[0].Partitions {
		sp := kmsg.NewListOffsetsResponseTopicPartition()
		sp.Partition = rp.Partition
		sp.ErrorCode = code
		st.Partitions = append(st.Partitions, sp)
	}
	resp.Topics = append(resp.Topics, st)
	return resp
}

// fetchError answers a fetch for topic alone (by name or id) with code on
// every partition; nil for any other fetch.
func fetchError(req *kmsg.FetchRequest, topic string, id [16]byte, code int16) kmsg.Response {
	if len(req.Topics) != 1 || (req.Topics[0].Topic != topic && req.Topics[0].TopicID != id) {
		return nil
	}
	resp := req.ResponseKind().(*kmsg.FetchResponse)
	rt := req.Topics[0]
	st := kmsg.NewFetchResponseTopic()
	st.Topic, st.TopicID = rt.Topic, rt.TopicID
	for _, rp := range rt.Partitions {
		sp := kmsg.NewFetchResponseTopicPartition()
		sp.Partition = rp.Partition
		sp.ErrorCode = code
		sp.HighWatermark, sp.LastStableOffset, sp.LogStartOffset = -1, -1, -1
		st.Partitions = append(st.Partitions, sp)
	}
	resp.Topics = append(resp.Topics, st)
	return resp
}
