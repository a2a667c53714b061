// Package testkit holds the set-up and checkers shared by projector's
// integration tests, soak, benchmark and demo: starting a test broker,
// producing a workload, waiting for a condition or for a consumer group to
// catch up, reading topics read_committed, and Jepsen-style checks of a
// projection topic against a workload's reference fold.
package testkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/app/broker"
	"github.com/projector-dev/projector/internal/core/topicread"
	"github.com/projector-dev/projector/internal/harness/workload"
)

// TB is the part of testing.TB that Broker uses; testkit does not import
// "testing" because it is linked into `projector bench` too.
type TB interface {
	Helper()
	Fatal(args ...any)
	Cleanup(func())
}

// Broker starts an in-memory embedded broker on a loopback port, with
// partitions partitions for auto-created topics, and creates topics with as
// many each. It closes the broker when the test ends through t.Cleanup: after
// the test's deferred calls and after every cleanup registered later, such as
// a worker's. It returns the broker and its address as a seed list.
func Broker(t TB, partitions int32, topics ...string) (*broker.Embedded, []string) {
	t.Helper()
	b, err := broker.Start(broker.Options{Listen: "127.0.0.1:0", Partitions: int(partitions)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	brokers := []string{b.Addr()}
	for _, topic := range topics {
		if err := CreateTopic(context.Background(), brokers, topic, partitions); err != nil {
			t.Fatal(err)
		}
	}
	return b, brokers
}

// Produce writes records to topic (key-hash partitioned, like a well-behaved
// producer), synchronously, in order.
func Produce(ctx context.Context, brokers []string, topic string, recs []workload.Record) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(5*time.Millisecond),
		kgo.MaxBufferedRecords(100_000), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		return err
	}
	defer cl.Close()
	const chunk = 5000
	for i := 0; i < len(recs); i += chunk {
		batch := make([]*kgo.Record, 0, chunk)
		for _, r := range recs[i:min(i+chunk, len(recs))] {
			batch = append(batch, &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value})
		}
		if err := cl.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			return fmt.Errorf("testkit: produce: %w", err)
		}
	}
	return nil
}

// ProduceRecords writes recs synchronously, in order, each to the partition
// it names (r.Partition: the records keep their headers, nil values and odd
// keys exactly as given), in batches of at most maxBatchBytes, so that
// records near a topic's max.message.bytes go out in batches the broker
// accepts. It fills in each record's offset.
func ProduceRecords(ctx context.Context, brokers []string, maxBatchBytes int32, recs ...*kgo.Record) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(5*time.Millisecond),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(maxBatchBytes),
		kgo.MaxBufferedBytes(int(maxBatchBytes)*64))
	if err != nil {
		return err
	}
	defer cl.Close()
	// A record of more than an eighth of the limit goes in a batch of its
	// own, the ones between it in batches the client packs: kgo's estimate
	// of a batch's size can fall short of what the broker counts
	// (uncompressed) by tens of KB when records carry many or large headers,
	// and a near-limit record packed with others was refused with
	// MESSAGE_TOO_LARGE.
	var errs []error
	produce := func(rs []*kgo.Record) {
		for _, pr := range cl.ProduceSync(ctx, rs...) {
			if pr.Err != nil && !errors.Is(pr.Err, context.Canceled) || pr.Err != nil && len(errs) == 0 {
				errs = append(errs, fmt.Errorf("testkit: produce to %s/%d (key %d bytes, value %d bytes): %w", pr.Record.Topic, pr.Record.Partition,
					len(pr.Record.Key), len(pr.Record.Value), pr.Err))
			}
		}
	}
	from := 0
	for i, r := range recs {
		if recordBytes(r) > int(maxBatchBytes)/8 {
			produce(recs[from:i])
			produce(recs[i : i+1])
			from = i + 1
		}
	}
	produce(recs[from:])
	return errors.Join(errs...)
}

// recordBytes is a record's key, value and headers.
func recordBytes(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// CreateTopic creates a topic with n partitions (ignoring "already exists").
func CreateTopic(ctx context.Context, brokers []string, topic string, n int32) error {
	return CreateTopicWith(ctx, brokers, topic, n, nil)
}

// CreateTopicWith creates a topic with n partitions and the given topic
// configs, such as max.message.bytes (ignoring "already exists").
func CreateTopicWith(ctx context.Context, brokers []string, topic string, n int32, configs map[string]*string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, n, -1, configs, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !strings.Contains(err.Error(), "TOPIC_ALREADY_EXISTS") {
		return err
	}
	return nil
}

// WaitCaughtUp waits until group has committed offsets at the end of every
// partition of topics, or short of it by transaction markers alone: a group
// commits the offset after the last record it was given, never past a
// marker, so a partition written in transactions (the ingress's events,
// forwarded by its claims) ends beyond what the group will ever commit.
func WaitCaughtUp(ctx context.Context, brokers []string, group string, topics ...string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	markersOnly := map[[2]int64]bool{} // (end, committed) of a partition → nothing but markers between
	var last string
	for {
		ends, err := adm.ListEndOffsets(ctx, topics...)
		if err == nil {
			var committed kadm.OffsetResponses
			committed, err = adm.FetchOffsets(ctx, group)
			if err == nil {
				behind := 0
				ends.Each(func(o kadm.ListedOffset) {
					c, ok := committed.Lookup(o.Topic, o.Partition)
					if o.Offset == 0 || (ok && c.At >= o.Offset) {
						return
					}
					if ok && c.At >= 0 && onlyMarkers(ctx, brokers, o, c.At, markersOnly) {
						return
					}
					behind++
				})
				if behind == 0 {
					return nil
				}
				last = fmt.Sprintf("%d partitions behind", behind)
			}
		}
		if err != nil {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testkit: group %s did not catch up: %s: %w", group, last, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// errRecordLeft ends onlyMarkers' read at the first record a consumer is
// given.
var errRecordLeft = errors.New("testkit: a record is left")

// onlyMarkers reports whether the committed records of o's partition from
// committed up to its end offset are transaction markers alone (read
// read_committed, once per end and committed offset: seen caches it).
func onlyMarkers(ctx context.Context, brokers []string, o kadm.ListedOffset, committed int64, seen map[[2]int64]bool) bool {
	k := [2]int64{o.Offset, committed}
	if v, ok := seen[k]; ok {
		return v
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rng := map[string]map[int32]topicread.Range{o.Topic: {o.Partition: {Start: committed, End: o.Offset}}}
	err := topicread.Partitions(rctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, rng, topicread.Options{},
		func(*kgo.Record) error { return errRecordLeft })
	if err != nil && !errors.Is(err, errRecordLeft) {
		return false // not known yet: asked again at the next round
	}
	seen[k] = err == nil
	return err == nil
}

// WaitFor polls cond until it holds, ctx ends (ctx.Err()) or within has
// passed. It is the one polling loop of the tests (Await wraps it): it looks
// again after 1 ms, then backs off to every 50 ms, so that a condition that
// is about to hold is seen at once and one that takes long costs little.
func WaitFor(ctx context.Context, within time.Duration, cond func() bool) error {
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for pause := time.Millisecond; !cond(); pause = min(2*pause, 50*time.Millisecond) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			if cond() { // it may have become true while we waited
				return nil
			}
			return fmt.Errorf("timed out after %s", within)
		case <-time.After(pause):
		}
	}
	return nil
}

// FatalTB is the part of testing.TB that Await uses.
type FatalTB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Await waits for cond like WaitFor and fails t, naming what it waited for,
// if cond does not hold within. Call it from the test's goroutine (Fatalf).
// Tests wait for conditions, not for time: a test that must show that
// something did NOT happen waits for a signal that the code had its chance
// (a committed transaction, a loop round, an idle runner), then asserts.
func Await(t FatalTB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := WaitFor(context.Background(), within, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// ReadAll reads every committed record of topic (read_committed), up to the
// end offsets at the time of the call.
func ReadAll(ctx context.Context, brokers []string, topic string) ([]*kgo.Record, error) {
	var out []*kgo.Record
	err := topicread.Committed(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, topic, func(r *kgo.Record) { out = append(out, r) })
	if errors.Is(err, topicread.ErrNoTopic) {
		return nil, nil
	}
	return out, err
}

// ProjectionValue is the contract's projection record.
type ProjectionValue struct {
	Projection    string          `json:"projection"`
	AggregateID   string          `json:"aggregateId"`
	AggregateType string          `json:"aggregateType"`
	Version       int64           `json:"version"`
	State         json.RawMessage `json:"state"`
	LastEventID   string          `json:"lastEventId"`
	LastEventType string          `json:"lastEventType"`
}

// Report is the outcome of checking a projection topic.
type Report struct {
	Records       int
	Keys          int
	Dup           int // a (key, version) seen more than once
	NonMonotonic  int // a version not greater than the key's previous one
	Lost          int // expected keys missing, or behind the expected version
	Diff          int // keys whose final state differs
	Unexpected    int // keys the reference does not know
	FirstProblems []string
}

func (r *Report) problem(format string, args ...any) {
	if len(r.FirstProblems) < 10 {
		r.FirstProblems = append(r.FirstProblems, fmt.Sprintf(format, args...))
	}
}

// OK reports whether no check failed.
func (r Report) OK() bool {
	return r.Dup == 0 && r.NonMonotonic == 0 && r.Lost == 0 && r.Diff == 0 && r.Unexpected == 0
}

func (r Report) String() string {
	return fmt.Sprintf("%d records, %d keys; output dup %d, nonmonotonic %d, lost %d, projection diff %d, unexpected %d %v",
		r.Records, r.Keys, r.Dup, r.NonMonotonic, r.Lost, r.Diff, r.Unexpected, r.FirstProblems)
}

// CheckProjection checks a projection topic's records (in offset order per
// partition) against the expected final states. A tombstone carries no
// version; it must be the key's last record iff the aggregate is deleted.
func CheckProjection(recs []*kgo.Record, exp map[string]workload.Final) Report {
	var rep Report
	rep.Records = len(recs)
	type keyState struct {
		version int64
		last    *kgo.Record
		seen    map[int64]bool
	}
	keys := map[string]*keyState{}
	for _, r := range recs {
		k := string(r.Key)
		ks := keys[k]
		if ks == nil {
			ks = &keyState{seen: map[int64]bool{}}
			keys[k] = ks
		}
		ks.last = r
		if r.Value == nil {
			ks.version++ // a tombstone stands for the next version
			continue
		}
		var v ProjectionValue
		if err := json.Unmarshal(r.Value, &v); err != nil {
			rep.Diff++
			rep.problem("%s: undecodable value %q", k, r.Value)
			continue
		}
		if ks.seen[v.Version] {
			rep.Dup++
			rep.problem("%s: version %d emitted twice", k, v.Version)
		}
		ks.seen[v.Version] = true
		if v.Version <= ks.version {
			rep.NonMonotonic++
			rep.problem("%s: version %d after %d", k, v.Version, ks.version)
		}
		ks.version = v.Version
	}
	rep.Keys = len(keys)
	for k, want := range exp {
		ks := keys[k]
		if ks == nil {
			rep.Lost++
			rep.problem("%s: no output (want version %d)", k, want.Version)
			continue
		}
		if want.Deleted {
			if ks.last.Value != nil {
				rep.Diff++
				rep.problem("%s: want tombstone, got %s", k, ks.last.Value)
			}
			continue
		}
		if ks.last.Value == nil {
			rep.Diff++
			rep.problem("%s: unexpected tombstone", k)
			continue
		}
		var v ProjectionValue
		_ = json.Unmarshal(ks.last.Value, &v)
		if v.Version < want.Version {
			rep.Lost++
			rep.problem("%s: final version %d, want %d", k, v.Version, want.Version)
			continue
		}
		if v.Version != want.Version {
			rep.Diff++
			rep.problem("%s: final version %d, want %d", k, v.Version, want.Version)
			continue
		}
		if !JSONEqual(v.State, want.State) {
			rep.Diff++
			rep.problem("%s: state %s, want %v", k, v.State, want.State)
		}
	}
	for k := range keys {
		if _, ok := exp[k]; !ok {
			rep.Unexpected++
			rep.problem("%s: not in the reference", k)
		}
	}
	return rep
}

// JSONEqual compares a JSON document with a decoded value.
func JSONEqual(doc []byte, want any) bool {
	var got any
	if err := json.Unmarshal(doc, &got); err != nil {
		return false
	}
	wb, _ := json.Marshal(want)
	var w any
	_ = json.Unmarshal(wb, &w)
	return reflect.DeepEqual(got, w)
}

// DeadLetter is one dead-letter record's essentials.
type DeadLetter struct {
	Value, Reason, Error, Source string
}

// DeadLetters decodes dead-letter records.
func DeadLetters(recs []*kgo.Record) []DeadLetter {
	out := make([]DeadLetter, 0, len(recs))
	for _, r := range recs {
		d := DeadLetter{Value: string(r.Value)}
		for _, h := range r.Headers {
			switch h.Key {
			case "projector-reason":
				d.Reason = string(h.Value)
			case "projector-error":
				d.Error = string(h.Value)
			case "projector-source":
				d.Source = string(h.Value)
			}
		}
		out = append(out, d)
	}
	return out
}

// CheckDeadLetters compares dead letters with the expected value → reason map:
// every expected value exactly once with its reason, nothing else.
func CheckDeadLetters(got []DeadLetter, want map[string]string) []string {
	var problems []string
	seen := map[string]int{}
	for _, d := range got {
		seen[d.Value]++
		r, ok := want[d.Value]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("unexpected dead letter %q (%s: %s)", d.Value, d.Reason, d.Error))
		case r != d.Reason:
			problems = append(problems, fmt.Sprintf("dead letter %q: reason %s (%s), want %s", d.Value, d.Reason, d.Error, r))
		}
	}
	var missing []string
	for v := range want {
		switch seen[v] {
		case 0:
			missing = append(missing, v)
		case 1:
		default:
			problems = append(problems, fmt.Sprintf("dead letter %q appears %d times", v, seen[v]))
		}
	}
	sort.Strings(missing)
	for _, v := range missing {
		problems = append(problems, fmt.Sprintf("missing dead letter %q (want %s)", v, want[v]))
	}
	return problems
}
