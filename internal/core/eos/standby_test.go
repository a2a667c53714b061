package eos

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/harness/testkit"
)

// TestStandbyReleaseStopsWrites (docs/design.md#one-writer-per-task): the
// standby is reading task X's changelog (slowly: the broker delays every
// fetch) when the loop takes X over. Once set returns without X, the
// standby writes nothing more of X – the loop may restore and process it
// from the position it finds – and goes on with the tasks it keeps (Y is
// read to its end afterwards: the standby had its chance to write X).
func TestStandbyReleaseStopsWrites(t *testing.T) {
	const (
		input, changelog = "in", "in.changelog"
		records          = 20000
	)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, input, changelog))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pc, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(changelog),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	x, y := state.Task{Topic: input, Partition: 0}, state.Task{Topic: input, Partition: 1}
	var recs []*kgo.Record
	for i := range records {
		recs = append(recs, &kgo.Record{Partition: x.Partition, Key: fmt.Appendf(nil, "k%05d", i), Value: []byte("v")})
	}
	for i := range 10 {
		recs = append(recs, &kgo.Record{Partition: y.Partition, Key: fmt.Appendf(nil, "k%05d", i), Value: []byte("v")})
	}
	if err := pc.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	// A slow broker: each fetch answers after 50 ms, small, so that X's
	// read takes many of them.
	c.ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		time.Sleep(50 * time.Millisecond) // sleep ok: the fault itself, a slow broker
		return nil, nil, false
	})

	st, err := state.Open("mem", state.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	cfg := &Config{Session: Session{Store: st, Logger: slog.New(slog.DiscardHandler), Now: time.Now,
		TransactionTimeout: 10 * time.Second}, ChangelogOf: func(in string) string { return in + ".changelog" }}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.FetchMaxPartitionBytes(4096))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	sb := newStandby(&restorer{cfg: cfg, stats: NewStats(), cl: cl, standby: true})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sb.run(runCtx)
	}()
	defer func() { stop(); <-done }()

	position := func(id state.Task) int64 {
		next, err := st.ChangelogOffset(id)
		if err != nil {
			t.Fatal(err)
		}
		return next
	}
	sb.set(map[state.Task]bool{x: true, y: true})
	testkit.Await(t, 30*time.Second, "the standby to have written part of X", func() bool { return position(x) > 0 })
	sb.set(map[state.Task]bool{y: true}) // the loop takes X over
	released := position(x)
	if released >= records {
		t.Fatalf("X was read to its end (%d) before the hand-over: the test proves nothing", released)
	}
	testkit.Await(t, 30*time.Second, "the standby to read Y to its end", func() bool { return position(y) == 10 })
	if got := position(x); got != released {
		t.Fatalf("the standby wrote X after handing it over: its position moved from %d to %d", released, got)
	}
	if tasks, caught, _ := sb.r.stats.Standby(); tasks != 1 || caught != 1 {
		t.Fatalf("standby stats: %d tasks, %d caught up, want 1 and 1", tasks, caught)
	}
}
