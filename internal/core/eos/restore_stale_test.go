package eos

import (
	"context"
	"encoding/binary"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/app/broker"
	"github.com/projector-dev/projector/internal/core/state"
)

// TestRestoreStaleStore (docs/decisions/007): a task's local store reflects
// its changelog up to offset 1 and holds key k (say a held event, which
// "first arrival wins" would take for the version's first arrival). While
// the partition was owned elsewhere, k was deleted (a tombstone), and the
// tombstone was compacted away: a restore that resumes from the stored
// offset never sees the deletion, and k stays forever. A store that last
// matched the changelog longer ago than the changelog's delete.retention.ms
// (read from the topic) is not trusted: the task restores from scratch, and
// k is gone. A store that matched within the retention resumes from its
// offset.
func TestRestoreStaleStore(t *testing.T) {
	for _, tc := range []struct {
		name  string
		age   time.Duration // of the store's last match with the changelog
		reset bool
	}{
		{"older-than-retention", 2 * time.Hour, true},
		{"within-retention", time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) { testRestoreStale(t, tc.age, tc.reset) })
	}
}

func testRestoreStale(t *testing.T, age time.Duration, reset bool) {
	const changelog = "in.changelog"
	c, err := broker.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.DefaultProduceTopic(changelog))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	str := func(s string) *string { return &s }
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"cleanup.policy": str("compact")}, changelog); err != nil {
		t.Fatal(err)
	}
	setRetention := func(d time.Duration) {
		t.Helper()
		resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: "delete.retention.ms", Value: str(strconv.FormatInt(d.Milliseconds(), 10))}}, changelog)
		if err == nil {
			_, err = resp.On(changelog, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	produce := func(k, v string) {
		t.Helper()
		r := &kgo.Record{Key: []byte(k)}
		if v != "" {
			r.Value = []byte(v)
		}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}

	// The store matched the changelog at offset 1 (k=held), age ago.
	clock := time.Now().Add(-age)
	st, err := state.Open("mem", state.Options{FS: vfs.NewMem(), Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	task := state.Task{Topic: "in", Partition: 0}
	produce("k", "held")
	if err := st.Restore(task, []state.Record{{Key: []byte("k"), Value: []byte("held")}}, 1); err != nil {
		t.Fatal(err)
	}
	clock = time.Now()

	// Elsewhere: k is deleted, more state is written.
	produce("k", "")
	for i := range 3 {
		produce("other"+strconv.Itoa(i), "x")
	}
	if reset {
		// …and, the store being older than the retention, the tombstone
		// is compacted away.
		setRetention(0)
		c.Compact()
		keys := map[string]bool{}
		rc, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{changelog: {0: kgo.NewOffset().AtStart()}}))
		if err != nil {
			t.Fatal(err)
		}
		for len(keys) < 3 {
			fs := rc.PollFetches(ctx)
			if err := fs.Err(); err != nil {
				t.Fatal(err)
			}
			fs.EachRecord(func(r *kgo.Record) { keys[string(r.Key)] = true })
		}
		rc.Close()
		if keys["k"] {
			t.Fatalf("setup: compaction kept k (keys %v)", keys)
		}
	}
	setRetention(time.Hour)

	hwms, err := adm.ListEndOffsets(ctx, changelog)
	if err != nil {
		t.Fatal(err)
	}
	end := hwms[changelog][0].Offset
	l := New[TaskHandler](Config{Session: Session{Store: st}}, nil)
	r := l.newRestorer(cl)
	if _, err := r.restoreTask(ctx, task, changelog, end, end); err != nil {
		t.Fatal(err)
	}
	_, held, err := st.Get(append(task.Prefix(), 'k'))
	if err != nil {
		t.Fatal(err)
	}
	if held {
		t.Fatal("k, deleted in the changelog, is still in the store after the restore")
	}
	for i := range 3 {
		if _, ok, _ := st.Get(append(task.Prefix(), "other"+strconv.Itoa(i)...)); !ok {
			t.Fatalf("other%d not restored", i)
		}
	}
	if got := l.stats.Restored(); reset && got != 3 || !reset && got != 4 {
		t.Fatalf("restored %d changelog records; want 3 (from scratch) when reset, 4 (from offset 1) otherwise", got)
	}
	next, matched, _, err := st.ChangelogPosition(task)
	if err != nil || next != end || time.Since(matched) > time.Minute {
		t.Fatalf("position after the restore: %d at %v (%v), want %d now", next, matched, err, end)
	}
}

// TestRestoreStoreOfUnknownAge: a store written before the match time was
// recorded (an 8-byte offset) is trusted when it has nothing to read, and
// stamped then; with records to read it restores from scratch (decision
// 007). A store with an old match time and nothing to read is trusted and
// its match time refreshed.
func TestRestoreStoreOfUnknownAge(t *testing.T) {
	const changelog = "in.changelog"
	c, err := broker.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, changelog))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(), kgo.DefaultProduceTopic(changelog))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 3 {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("k" + strconv.Itoa(i)), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	const end = 3
	task := state.Task{Topic: "in", Partition: 0}
	for _, tc := range []struct {
		name      string
		stored    int64
		legacy    bool          // an 8-byte offset; else stamped age ago
		age       time.Duration // with the default retention of 24 h
		wantReset bool
	}{
		{"legacy-caught-up", end, true, 0, false},
		{"legacy-behind", 1, true, 0, true},
		{"old-caught-up", end, false, 48 * time.Hour, false},
		{"old-behind", 1, false, 48 * time.Hour, true},
		{"recent-behind", 1, false, time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := time.Now().Add(-tc.age)
			st, err := state.Open("mem", state.Options{FS: vfs.NewMem(), Now: func() time.Time { return clock }})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			// A local-only key: present after the restore iff no reset.
			local := append(task.Prefix(), "local"...)
			if err := st.Restore(task, []state.Record{{Key: []byte("local"), Value: []byte("x")}}, tc.stored); err != nil {
				t.Fatal(err)
			}
			if tc.legacy {
				// What an older version wrote: the offset alone.
				txn := st.NewTxn()
				txn.Set(append([]byte{'o'}, task.Prefix()...), binary.BigEndian.AppendUint64(nil, uint64(tc.stored)))
				if err := txn.Commit(); err != nil {
					t.Fatal(err)
				}
				if _, m, _, err := st.ChangelogPosition(task); err != nil || !m.IsZero() {
					t.Fatalf("setup: legacy offset reads with match time %v (%v)", m, err)
				}
			}
			clock = time.Now()
			l := New[TaskHandler](Config{Session: Session{Store: st}}, nil)
			r := l.newRestorer(cl)
			if _, err := r.restoreTask(ctx, task, changelog, end, end); err != nil {
				t.Fatal(err)
			}
			if _, ok, _ := st.Get(local); ok == tc.wantReset {
				t.Fatalf("local key present %v after the restore; want a reset: %v", ok, tc.wantReset)
			}
			next, matched, _, err := st.ChangelogPosition(task)
			if err != nil || next != end || time.Since(matched) > time.Minute {
				t.Fatalf("position after the restore: %d at %v (%v), want %d now", next, matched, err, end)
			}
		})
	}
}
