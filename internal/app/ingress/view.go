package ingress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/receipt"
	"github.com/projector-dev/projector/internal/core/topicread"
)

// view is this instance's copy of the committed receipts, read from the
// start of the receipts topic with read_committed: the events' receipts
// and the claim receipts. It keeps the first receipt it reads per key: the
// processor writes one per key (see internal/core/receipt), so the
// first is the only one.
//
// The view is caught up once it has read every partition to the last stable
// offset listed when it started: before that a missing receipt may only mean
// "not read yet", and the server answers 503 rather than produce a second
// event for a key whose receipt it has not seen.
type view struct {
	log *slog.Logger

	// changed is closed and replaced (under mu) whenever the view
	// changes; read without mu by watch.
	changed atomic.Pointer[chan struct{}]

	mu sync.Mutex
	// byKey holds each receipt's encoded value (about 300 bytes), not the
	// decoded struct (about 750 bytes in memory): every ingested event has
	// one for ever, and a lookup decodes just the few it needs.
	byKey map[string][]byte
	// claims holds each decided key's claim receipt (encoded), by
	// receipt.ClaimKey.
	claims   map[string][]byte
	caughtUp bool
	err      error // why the view is not caught up, when it failed
}

func newView(log *slog.Logger) *view {
	v := &view{log: log, byKey: map[string][]byte{}, claims: map[string][]byte{}}
	ch := make(chan struct{})
	v.changed.Store(&ch)
	return v
}

// get returns the receipt of key, nil if the view has none.
func (v *view) get(key string) *receipt.Receipt {
	v.mu.Lock()
	val := v.byKey[key]
	v.mu.Unlock()
	if val == nil {
		return nil
	}
	r, err := receipt.Decode(val) // decoded once before in add: cannot fail
	if err != nil {
		v.log.Error("receipts: a stored receipt no longer decodes", "err", err)
		return nil
	}
	return r
}

// claim returns the claim receipt of (tenant, key), nil if the view has
// none: the key is not decided, or it was ingested before claims existed.
func (v *view) claim(tenant, key string) *receipt.ClaimReceipt {
	v.mu.Lock()
	val := v.claims[receipt.ClaimKey(tenant, key)]
	v.mu.Unlock()
	if val == nil {
		return nil
	}
	c, err := receipt.DecodeClaimReceipt(val) // decoded once before in add: cannot fail
	if err != nil {
		v.log.Error("receipts: a stored claim receipt no longer decodes", "err", err)
		return nil
	}
	return c
}

// watch returns a channel closed when the view next changes (so a waiter
// that looks after taking it can look again).
func (v *view) watch() <-chan struct{} { return *v.changed.Load() }

// notify wakes the watchers; v.mu is held.
func (v *view) notify() {
	close(*v.changed.Load())
	ch := make(chan struct{})
	v.changed.Store(&ch)
}

// ready reports whether the view is caught up, and why not.
func (v *view) ready() (bool, string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case v.caughtUp:
		return true, ""
	case v.err != nil:
		return false, "receipts: " + v.err.Error()
	default:
		return false, "receipts view catching up"
	}
}

// keyed is a validated receipt value under its receipt key (claim: a
// claim receipt under its receipt.ClaimKey).
type keyed struct {
	key   string
	value []byte
	claim bool
}

func (v *view) add(rs []keyed) {
	if len(rs) == 0 {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, r := range rs {
		m := v.byKey
		if r.claim {
			m = v.claims
		}
		if _, ok := m[r.key]; !ok {
			m[r.key] = r.value
		}
	}
	v.notify()
}

func (v *view) setCaughtUp() {
	v.mu.Lock()
	v.caughtUp, v.err = true, nil
	v.notify()
	v.mu.Unlock()
}

func (v *view) setErr(err error) {
	v.mu.Lock()
	v.err = err
	v.mu.Unlock()
}

// run reads the receipts topic until ctx is done. It retries listing the end
// offsets until it succeeds (the topic may be created by a processor that
// starts later); read errors are retried by the client.
func (v *view) run(ctx context.Context, opts []kgo.Opt, topic string) error {
	var ends *topicread.Ends
	for {
		var err error
		ends, err = stableEnds(ctx, opts, topic)
		if err == nil {
			break
		}
		v.setErr(err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
	copts := append(append([]kgo.Opt(nil), opts...), topicread.ClientOpts(topicread.Options{})...)
	cl, err := kgo.NewClient(append(copts, kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond))...)
	if err != nil {
		return fmt.Errorf("ingress: receipts reader: %w", err)
	}
	defer cl.Close()
	if ends.Left() == 0 {
		v.setCaughtUp()
	}
	for {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		for _, fe := range fs.Errors() {
			if fe.Err != nil && !errors.Is(fe.Err, context.Canceled) {
				v.log.Warn("receipts: fetch error (retried)", "topic", fe.Topic, "partition", fe.Partition, "err", fe.Err)
			}
		}
		var rs []keyed
		left := ends.Left()
		fs.EachRecord(func(r *kgo.Record) {
			ends.See(r)
			if r.Attrs.IsControl() || r.Value == nil {
				return
			}
			k, err := decodeKeyed(r)
			if err != nil {
				v.log.Warn("receipts: malformed record skipped", "partition", r.Partition, "offset", r.Offset, "err", err)
				return
			}
			rs = append(rs, k)
		})
		v.add(rs)
		if left > 0 && ends.Left() == 0 { // only once this fetch's receipts are in the view
			v.setCaughtUp()
		}
	}
}

// decodeKeyed validates a receipts-topic record: a claim receipt (header
// receipt.ClaimHeader) or an event's receipt. It is keyed by its own
// fields, not the record key, and copied, so that the fetch's buffer is
// not kept alive by it.
func decodeKeyed(r *kgo.Record) (keyed, error) {
	for _, h := range r.Headers {
		if h.Key == receipt.ClaimHeader {
			c, err := receipt.DecodeClaimReceipt(r.Value)
			if err != nil {
				return keyed{}, err
			}
			return keyed{receipt.ClaimKey(c.TenantID, c.Key), bytes.Clone(r.Value), true}, nil
		}
	}
	rc, err := receipt.Decode(r.Value)
	if err != nil {
		return keyed{}, err
	}
	return keyed{receipt.Key(rc.TenantID, rc.Key, rc.Index), bytes.Clone(r.Value), false}, nil
}

// stableEnds follows the read of topic toward the last stable offsets of its
// partitions as listed now (read_committed: what a reader can reach).
func stableEnds(ctx context.Context, opts []kgo.Opt, topic string) (*topicread.Ends, error) {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ranges, missing, err := topicread.StableEnds(lctx, opts, topic)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("topic %s does not exist yet", topic)
	}
	return topicread.NewEnds(ranges), nil
}
