package ops

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/envelope"
	"github.com/projector-dev/projector/internal/engine/guard"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/projection"
	"github.com/projector-dev/projector/sideeffects"
	"github.com/projector-dev/projector/sideeffects/effect"
)

func TestMissing(t *testing.T) {
	for _, tc := range []struct {
		version int64
		held    []int64
		want    string
	}{
		{0, nil, ""},
		{1, []int64{3}, "2"},
		{1, []int64{3, 5}, "2,4"},
		{1, []int64{2}, ""}, // drains on the next event: not a gap
		{0, []int64{4, 5, 9}, "1-3,6-8"},
		{10, []int64{11, 12, 20}, "13-19"},
	} {
		a := &Aggregate{Version: tc.version}
		for _, v := range tc.held {
			a.Held = append(a.Held, Held{Version: v})
		}
		if got := strings.Join(a.Missing(), ","); got != tc.want {
			t.Errorf("version %d held %v: missing %q, want %q", tc.version, tc.held, got, tc.want)
		}
	}
}

// memKV is a guard.KV that records every write as a changelog record
// (the state key without a task prefix, kind byte first).
type memKV struct {
	m    map[string][]byte
	recs []*kgo.Record
}

func (k *memKV) Get(key []byte) ([]byte, bool, error) { v, ok := k.m[string(key)]; return v, ok, nil }
func (k *memKV) Set(key, val []byte) {
	k.m[string(key)] = append([]byte(nil), val...)
	k.recs = append(k.recs, &kgo.Record{Key: append([]byte(nil), key...), Value: append([]byte(nil), val...)})
}
func (k *memKV) Delete(key []byte) {
	delete(k.m, string(key))
	k.recs = append(k.recs, &kgo.Record{Key: append([]byte(nil), key...)})
}
func (k *memKV) Scan(prefix []byte, fn func(key, value []byte) error) error {
	var keys []string
	for s := range k.m {
		if strings.HasPrefix(s, string(prefix)) {
			keys = append(keys, s)
		}
	}
	sort.Strings(keys)
	for _, s := range keys {
		if err := fn([]byte(s), k.m[s]); err != nil {
			return err
		}
	}
	return nil
}

func event(t *testing.T, id, agg string, v int) (*envelope.Event, guard.Source) {
	t.Helper()
	val := fmt.Appendf(nil, `{"eventId":%q,"eventType":"Set","aggregateId":%q,"aggregateVersion":%d,"payload":{"v":%d}}`, id, agg, v, v)
	ev, err := envelope.Decode(val, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ev, guard.Source{Offset: int64(v), Key: []byte(agg), Value: val}
}

// TestReadLastCommittedValue writes guard state to a changelog the way the
// processor does (transactions, one partition per task), with an aborted
// transaction on top, and checks that Read sees the last committed value per
// key: applied versions, held events, drained held events gone.
func TestReadLastCommittedValue(t *testing.T) {
	cl := processor.ChangelogTopic("g", "in")
	_, brokers := testkit.Broker(t, 2, cl)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tgt := Target{Brokers: brokers, Group: "g", Inputs: []string{"in"}}
	g := &guard.Guard{P: &projection.Projection{Name: "p", Topic: "p.v1", Versioned: true,
		Handler: projection.Rules{"Set": projection.Merge}}}
	kv := &memKV{m: map[string][]byte{}}
	at := time.UnixMilli(1_800_000_000_000)
	offer := func(agg string, v int) {
		ev, src := event(t, fmt.Sprintf("%s-%d", agg, v), agg, v)
		if _, err := g.Offer(kv, nil, ev, src, at); err != nil {
			t.Fatal(err)
		}
	}
	// A: 1, 3, 5 held behind 2 and 4; then 2 arrives (3 drains, 5 waits).
	// B: 2 held (nothing applied). C: in order.
	offer("A", 1)
	offer("A", 3)
	offer("A", 5)
	offer("B", 2)
	offer("C", 1)
	offer("C", 2)
	offer("A", 2)

	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("ops-test"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	txn := func(commit bool, recs []*kgo.Record) {
		if err := producer.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			r.Topic, r.Partition = cl, 1
		}
		if err := producer.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := producer.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	txn(true, kv.recs[:4])
	txn(true, kv.recs[4:])
	// An aborted transaction that would have applied B's gap away.
	kv.recs = nil
	if _, err := g.Expire(kv, nil, "B", projection.Skip, at, 0); err != nil {
		t.Fatal(err)
	}
	txn(false, kv.recs)

	st, err := Read(ctx, tgt, Query{States: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range st.Aggregates {
		var held []int64
		for _, h := range a.Held {
			held = append(held, h.Version)
			if h.EventID != fmt.Sprintf("%s-%d", a.Aggregate, h.Version) || h.EventType != "Set" || !h.Since.Equal(at) {
				t.Errorf("%s held v%d: %+v", a.Aggregate, h.Version, h)
			}
		}
		got = append(got, fmt.Sprintf("%s %s %s v%d held%v missing%v %s", a.Projection, a.Aggregate, a.Task(), a.Version, held, a.Missing(), a.State))
	}
	want := []string{
		`p A in/1 v3 held[5] missing[4] {"v":3}`,
		`p B in/1 v0 held[2] missing[1] `,
		`p C in/1 v2 held[] missing[] {"v":2}`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("read:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := len(st.Gaps()); n != 2 {
		t.Errorf("gaps: %d, want 2", n)
	}
	// Filters.
	st, err = Read(ctx, tgt, Query{Aggregate: "A", Partitions: map[string][]int32{"in": {1}}})
	if err != nil || len(st.Aggregates) != 1 || st.Aggregates[0].State != nil || st.HeldCount("p", "A") != 1 {
		t.Errorf("read A: %v %+v", err, st)
	}
	st, err = Read(ctx, tgt, Query{Aggregate: "A", Partitions: map[string][]int32{"in": {0}}})
	if err != nil || len(st.Aggregates) != 0 || st.Records != 0 {
		t.Errorf("read A on partition 0: %v %+v", err, st)
	}
	if st, err = Read(ctx, tgt, Query{Projection: "other"}); err != nil || len(st.Aggregates) != 0 {
		t.Errorf("read projection other: %v %+v", err, st)
	}
}

// TestReadNoChangelog: a processor that never ran has no changelog; the read
// says so instead of reporting an empty state.
func TestReadNoChangelog(t *testing.T) {
	_, brokers := testkit.Broker(t, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := Read(ctx, Target{Brokers: brokers, Group: "g", Inputs: []string{"in"}}, Query{})
	if !errors.Is(err, ErrNoChangelog) || !strings.Contains(err.Error(), "g.in.changelog") {
		t.Fatalf("err %v, want ErrNoChangelog naming g.in.changelog", err)
	}
}

// TestSkipGapRecord: the command record is JSON with the command header,
// keyed by the aggregate, on the partition asked for or, with -1, where
// Kafka's default partitioner puts the key.
func TestSkipGapRecord(t *testing.T) {
	_, brokers := testkit.Broker(t, 8, "in")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// Where a keyed producer puts CASE-9.
	p, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.ProduceSync(ctx, &kgo.Record{Topic: "in", Key: []byte("CASE-9"), Value: []byte("{}")}).First()
	p.Close()
	if err != nil {
		t.Fatal(err)
	}
	byKey := r.Partition
	other := (byKey + 3) % 8
	sent, err := SkipGap(ctx, brokers, nil, processor.Command{Aggregate: "CASE-9", Projection: "p", Note: "INC-1 <a&b>"},
		[]Sent{{Topic: "in", Partition: -1}, {Topic: "in", Partition: other}})
	if err != nil {
		t.Fatal(err)
	}
	if len(sent) != 2 || sent[0].Partition != byKey || sent[1].Partition != other {
		t.Fatalf("sent %v; want partitions %d (by key) and %d", sent, byKey, other)
	}
	if _, err := SkipGap(ctx, brokers, nil, processor.Command{Aggregate: "CASE-9"}, []Sent{{Topic: "in", Partition: 8}}); err == nil {
		t.Error("no error for a partition the topic does not have")
	}
	recs, err := testkit.ReadAll(ctx, brokers, "in")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, r := range recs {
		if len(r.Headers) == 0 {
			continue
		}
		n++
		if r.Headers[0].Key != processor.HeaderCommand || string(r.Key) != "CASE-9" ||
			!bytes.Equal(r.Value, []byte(`{"op":"skip-gap","projection":"p","aggregate":"CASE-9","note":"INC-1 <a&b>"}`)) {
			t.Errorf("command record: key %q value %s headers %v", r.Key, r.Value, r.Headers)
		}
	}
	if n != 2 {
		t.Errorf("%d command records, want 2", n)
	}
}

// TestSendResolveRecord: the resolve command record carries the note with
// <, > and & as they are, and no more of it than the ledger keeps
// (effect.MaxNoteBytes), whatever the operator typed.
func TestSendResolveRecord(t *testing.T) {
	_, brokers := testkit.Broker(t, 1, "fx")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := []kgo.Opt{kgo.SeedBrokers(brokers...)}
	long := "<checked> & " + strings.Repeat("n", 1<<20)
	for _, note := range []string{"checked <by> hand & mail", long} {
		if err := SendResolve(ctx, opts, "fx", "k<1>", effect.Succeeded, note); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := testkit.ReadAll(ctx, brokers, "fx")
	if err != nil || len(recs) != 2 {
		t.Fatalf("%d records, %v", len(recs), err)
	}
	if want := `{"op":"resolve","as":"succeeded","note":"checked <by> hand & mail"}`; string(recs[0].Value) != want || string(recs[0].Key) != "k<1>" {
		t.Errorf("command record %s: %s, want %s", recs[0].Key, recs[0].Value, want)
	}
	var c sideeffects.Command
	if err := json.Unmarshal(recs[1].Value, &c); err != nil || len(c.Note) > effect.MaxNoteBytes || !strings.HasPrefix(c.Note, "<checked> & nnn") ||
		!strings.Contains(c.Note, effect.TruncatedMark) {
		t.Errorf("a 1 MiB note: sent %d bytes of it (%v), want it cut to %d", len(c.Note), err, effect.MaxNoteBytes)
	}
}
