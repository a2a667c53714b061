package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/projection"
)

// paceTick is how often the paced producer sends the records due by then:
// at 1,000 records/s a burst is 2 records, at 150,000 records/s 300.
const paceTick = 2 * time.Millisecond

// pace produces recs to topic at rate records/s, in a burst every paceTick
// of the records due by then (so a late tick catches up and the average
// holds), each record's Timestamp set as it is produced, without linger.
// sent[i] is record i's produce time (Unix ns); prod is the time from the
// first produce to the last. It returns once every record is acknowledged.
func pace(ctx context.Context, brokers []string, topic string, recs []workload.Record, rate float64) (sent []int64, prod time.Duration, _ error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(0),
		kgo.MaxBufferedRecords(100_000), kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)))
	if err != nil {
		return nil, 0, err
	}
	defer cl.Close()
	var (
		mu   sync.Mutex
		perr error
	)
	failed := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			perr = errors.Join(perr, err)
			mu.Unlock()
		}
	}
	sent = make([]int64, len(recs))
	tick := time.NewTicker(paceTick)
	defer tick.Stop()
	start := time.Now()
	for i := 0; i < len(recs); {
		due := min(len(recs), 1+int(rate*time.Since(start).Seconds()))
		for ; i < due; i++ {
			now := time.Now()
			sent[i] = now.UnixNano()
			cl.Produce(ctx, &kgo.Record{Topic: topic, Key: recs[i].Key, Value: recs[i].Value, Timestamp: now}, failed)
		}
		if i == len(recs) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-tick.C:
		}
	}
	prod = time.Duration(sent[len(sent)-1] - sent[0])
	if err := cl.Flush(ctx); err != nil {
		return nil, 0, err
	}
	mu.Lock()
	defer mu.Unlock()
	if perr != nil {
		return nil, 0, fmt.Errorf("bench latency: produce: %w", perr)
	}
	return sent, max(prod, time.Millisecond), nil
}

// output is one projection record as the reader saw it: the event it is
// the output of (outputKey), its Timestamp (Unix ms) and when the reader
// received it (Unix ns).
type output struct {
	key      string
	ts, recv int64
}

// reader reads a projection topic read_committed from its start. Its
// goroutine owns outs and tombs until done is closed.
type reader struct {
	cl    *kgo.Client
	n     atomic.Int64
	outs  []output
	tombs map[string]int // aggregate → tombstones read
	done  chan struct{}
	once  sync.Once
}

func startReader(brokers []string, topic string) (*reader, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	r := &reader{cl: cl, tombs: map[string]int{}, done: make(chan struct{})}
	go r.loop()
	return r, nil
}

func (r *reader) loop() {
	defer close(r.done)
	for {
		fs := r.cl.PollFetches(context.Background())
		if fs.IsClientClosed() {
			return
		}
		recv := time.Now().UnixNano()
		fs.EachRecord(func(rec *kgo.Record) {
			r.outs = append(r.outs, output{key: r.outputKey(rec), ts: rec.Timestamp.UnixMilli(), recv: recv})
		})
		r.n.Add(int64(fs.NumRecords()))
	}
}

// count is how many records the reader has read.
func (r *reader) count() int64 { return r.n.Load() }

// close stops the reader and returns what it read.
func (r *reader) close() []output {
	r.once.Do(r.cl.Close)
	<-r.done
	return r.outs
}

var lastEventID = []byte(`,"lastEventId":"`)

// outputKey is the key of the event a projection record is the output of:
// its lastEventId; a tombstone (no value) has none, so it is "closed:",
// the aggregate (its record key) and its rank among the aggregate's
// tombstones: an aggregate's records are read in version order (one
// partition), and tombstoneKeys ranks the events that leave an aggregate
// deleted the same way.
func (r *reader) outputKey(rec *kgo.Record) string {
	if rec.Value == nil {
		agg := string(rec.Key)
		r.tombs[agg]++
		return tombstoneKey(agg, r.tombs[agg])
	}
	// The member follows the state, which is the workload's payloads: none
	// has this name.
	if i := bytes.LastIndex(rec.Value, lastEventID); i >= 0 {
		id := rec.Value[i+len(lastEventID):]
		if j := bytes.IndexByte(id, '"'); j >= 0 && bytes.IndexByte(id[:j], '\\') < 0 {
			return string(id[:j])
		}
	}
	var v struct {
		ID string `json:"lastEventId"`
	}
	if json.Unmarshal(rec.Value, &v) != nil {
		return ""
	}
	return v.ID
}

func tombstoneKey(agg string, rank int) string { return "closed:" + agg + ":" + strconv.Itoa(rank) }

// firstDelivery is what measure reads of a first delivery (KindEvent).
type firstDelivery struct {
	ID      string `json:"eventId"`
	Type    string `json:"eventType"`
	Version int64  `json:"aggregateVersion"`
}

// outputKeys are the keys (reader.outputKey) of the outputs the first
// deliveries of recs make, by record index: an event's id, or, for an
// event that leaves its aggregate deleted (a delete, or an unlisted type
// after one: the state stays deleted), tombstoneKey, ranked in version
// order. Rules decide which types delete, merge or leave the state.
func outputKeys(recs []workload.Record, evs []firstDelivery) []string {
	byAgg := map[string][]int{}
	for i, r := range recs {
		if r.Kind == workload.KindEvent {
			byAgg[string(r.Key)] = append(byAgg[string(r.Key)], i)
		}
	}
	rules := Rules()
	keys := make([]string, len(recs))
	for agg, is := range byAgg {
		slices.SortFunc(is, func(a, b int) int { return cmp.Compare(evs[a].Version, evs[b].Version) })
		deleted, rank := false, 0
		for _, i := range is {
			switch rules[evs[i].Type] {
			case projection.Delete:
				deleted = true
			case projection.Merge:
				deleted = false
			}
			keys[i] = evs[i].ID
			if deleted {
				rank++
				keys[i] = tombstoneKey(agg, rank)
			}
		}
	}
	return keys
}

// arrivals tells, for every first delivery of recs (in produce order),
// whether it was held: produced before an earlier version of its
// aggregate, so that its output waited for the input, not for the
// processor. It is the reference fold's ordering (workload/fold.go), on
// the first deliveries alone: stale writers, conflicts and duplicates move
// no version.
type arrivals struct {
	next map[string]int64          // aggregate → the version applied next
	held map[string]map[int64]bool // aggregate → versions waiting
}

// arrive records a first delivery of aggregate agg and reports whether it
// was held.
func (a *arrivals) arrive(agg string, version int64) (held bool) {
	next := max(a.next[agg], 1)
	if version != next {
		if a.held[agg] == nil {
			a.held[agg] = map[int64]bool{}
		}
		a.held[agg][version] = true
		return true
	}
	for next++; a.held[agg][next]; next++ {
		delete(a.held[agg], next)
	}
	a.next[agg] = next
	return false
}

// measure matches the outputs with the applied events produced at or after
// from (Unix ns) and sets Expected, Matched, Held and the latencies.
func (l *LatencyLevel) measure(recs []workload.Record, sent []int64, outs []output, from int64) error {
	type want struct {
		i    int
		held bool
	}
	evs := make([]firstDelivery, len(recs))
	for i, r := range recs {
		if r.Kind != workload.KindEvent {
			continue
		}
		if err := json.Unmarshal(r.Value, &evs[i]); err != nil {
			return fmt.Errorf("bench latency: record %d, a first delivery, does not decode: %w", i, err)
		}
	}
	keys := outputKeys(recs, evs)
	at := make(map[string]want, len(recs))
	arr := arrivals{next: map[string]int64{}, held: map[string]map[int64]bool{}}
	for i, r := range recs {
		if r.Kind != workload.KindEvent {
			continue
		}
		held := arr.arrive(string(r.Key), evs[i].Version)
		if sent[i] >= from {
			at[keys[i]] = want{i, held}
		}
	}
	l.Expected = len(at)
	var stamp, read, heldRead []time.Duration
	for _, o := range outs {
		w, ok := at[o.key]
		if !ok {
			continue
		}
		delete(at, o.key) // the first output of an event counts
		l.Matched++
		d := time.Duration(o.recv - sent[w.i])
		if w.held {
			heldRead = append(heldRead, d)
			continue
		}
		in := time.Unix(0, sent[w.i])
		stamp = append(stamp, time.UnixMilli(o.ts).Sub(time.UnixMilli(in.UnixMilli())))
		read = append(read, d)
	}
	l.Stamp, l.Read, l.Held = latencyStats(stamp), latencyStats(read), latencyStats(heldRead)
	return nil
}
