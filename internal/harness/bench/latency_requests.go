package bench

import (
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// timedRequests are the Kafka requests of the processor's transaction
// cycle whose round trips a level reports: where a record's time goes when
// the processor is not busy.
var timedRequests = []kmsg.Key{kmsg.Fetch, kmsg.Produce, kmsg.AddPartitionsToTxn,
	kmsg.AddOffsetsToTxn, kmsg.TxnOffsetCommit, kmsg.EndTxn}

// RequestStats are the round trips (request written to response read) of
// one kind of request of the processor's clients.
type RequestStats struct {
	Name string
	LatencyStats
}

// requestTimer is a kgo hook that keeps the round trips of the
// processor's clients' requests by kind, once started.
type requestTimer struct {
	mu sync.Mutex
	on bool
	d  map[int16][]time.Duration
}

var _ kgo.HookBrokerE2E = (*requestTimer)(nil)

func (t *requestTimer) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e kgo.BrokerE2E) {
	if e.Err() != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.on {
		t.d[key] = append(t.d[key], e.DurationE2E())
	}
}

// start drops what was timed so far and times from now on.
func (t *requestTimer) start() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.on, t.d = true, map[int16][]time.Duration{}
}

// stats are the timedRequests' round trips since start.
func (t *requestTimer) stats() []RequestStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []RequestStats
	for _, k := range timedRequests {
		out = append(out, RequestStats{kmsg.NameForKey(int16(k)), latencyStats(t.d[int16(k)])})
	}
	return out
}
