package eos

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/core/acl"
)

// retention is a changelog topic's delete.retention.ms, as read at a time.
type retention struct {
	d    time.Duration
	read time.Time
}

// Tombstone retention (docs/decisions/007).
const (
	// defaultDeleteRetention is Kafka's default delete.retention.ms, assumed
	// when the broker does not say.
	defaultDeleteRetention = 24 * time.Hour
	// retentionTTL is how long a topic's delete.retention.ms read is used
	// before it is read again (an operator may change it).
	retentionTTL = 10 * time.Minute
	// matchRefresh: a task whose store is found to match the changelog on
	// (re)assignment, with nothing to read, gets its match time refreshed
	// when the recorded one is older than this (one small synced write).
	matchRefresh = time.Minute
)

// deleteRetention returns how long the changelog topic keeps a tombstone
// after compaction reaches it: its delete.retention.ms.
func (r *restorer) deleteRetention(ctx context.Context, topic string) (time.Duration, error) {
	if c, ok := r.retentions[topic]; ok && time.Since(c.read) < retentionTTL {
		return c.d, nil
	}
	rcs, err := kadm.NewClient(r.cl).DescribeTopicConfigs(ctx, topic)
	var rc kadm.ResourceConfig
	if err == nil {
		rc, err = rcs.On(topic, nil)
	}
	if err == nil {
		err = rc.Err
	}
	if acl.IsAuthorization(err) {
		// Not guessed: a retention shorter than the default assumed would
		// let a stale store miss deletions. The loop checks this permission
		// at start (access.go); this is for brokers that do not report it.
		return 0, fmt.Errorf("eos: restore: describe configs of %s: %w", topic,
			acl.Denied(err, acl.Topic(topic, kmsg.ACLOperationDescribeConfigs, "read its delete.retention.ms, docs/decisions/007")))
	}
	if err != nil {
		return 0, fmt.Errorf("eos: restore: describe configs of %s: %w", topic, brokerErr(err))
	}
	d := defaultDeleteRetention
	for _, c := range rc.Configs {
		if c.Key != "delete.retention.ms" || c.Value == nil {
			continue
		}
		ms, err := strconv.ParseInt(*c.Value, 10, 64)
		if err != nil || ms < 0 {
			return 0, fmt.Errorf("eos: restore: %s: delete.retention.ms %q is not a duration in ms", topic, *c.Value)
		}
		d = time.Duration(ms) * time.Millisecond
	}
	if r.retentions == nil {
		r.retentions = make(map[string]retention)
	}
	r.retentions[topic] = retention{d: d, read: time.Now()}
	return d, nil
}

// staleStore reports why a task's store, which last matched the changelog at
// matched (zero: unknown) and must read records after it, cannot resume from
// its offset: the changelog may have dropped, by compaction, a tombstone
// written after the match ("" when it may resume). A tombstone stays at
// least delete.retention.ms after it was written; the last tenth of that
// absorbs clock skew and the time between a write and its stamp.
func (r *restorer) staleStore(ctx context.Context, topic string, matched time.Time) (string, error) {
	ret, err := r.deleteRetention(ctx, topic)
	if err != nil {
		return "", err
	}
	if matched.IsZero() {
		return "the store does not record when it last matched the changelog (written by an older version)", nil
	}
	age := r.cfg.Store.Now().Sub(matched) // the clock that stamped it
	if age >= ret-ret/10 {
		return fmt.Sprintf("the store last matched the changelog %s ago; the changelog keeps tombstones for %s (delete.retention.ms)",
			age.Round(time.Second), ret), nil
	}
	return "", nil
}
