package rebuild

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/core/acl"
	"github.com/projector-dev/projector/internal/core/topicread"
)

// partition is one input partition's range for this run.
type partition struct {
	topic     string
	partition int32
	start     int64 // where this run starts: the committed offset, else the reset point
	end       int64 // the end offset captured at start
	at        int64 // the group's committed offset now (start until it commits)
	// moved: at changed at the last poll; checked: the range [at, end) has
	// been read since at last changed (settle); markers: it held no record
	// a consumer is given, only transaction markers (or aborted records).
	moved, checked, markers bool
}

// positions track the rebuild group against the end offsets taken at start.
type positions struct {
	group   string
	topics  []string
	parts   []*partition
	resumed bool // some partition had a committed offset at start
}

// capture lists the inputs' end offsets (last stable offsets: what a
// read_committed consumer reaches) and where the group starts on each
// partition: its committed offset, or, without one, the earliest offset or the
// first offset at or after from.
func capture(ctx context.Context, adm *kadm.Client, group string, topics []string, from time.Time) (*positions, error) {
	ends, err := adm.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("rebuild: end offsets of %v: %w", topics, err)
	}
	for _, t := range topics {
		ps, ok := ends[t]
		if !ok {
			return nil, fmt.Errorf("rebuild: input topic %s does not exist", t)
		}
		for _, o := range ps {
			if errors.Is(o.Err, kerr.UnknownTopicOrPartition) {
				return nil, fmt.Errorf("rebuild: input topic %s does not exist", t)
			}
			if o.Err != nil {
				return nil, fmt.Errorf("rebuild: end offset of %s/%d: %w", t, o.Partition, o.Err)
			}
		}
	}
	committed, err := fetchCommitted(ctx, adm, group, topics)
	if err != nil {
		return nil, fmt.Errorf("rebuild: committed offsets of group %s: %w", group, err)
	}
	var resets kadm.ListedOffsets
	if from.IsZero() {
		resets, err = adm.ListStartOffsets(ctx, topics...)
	} else {
		resets, err = adm.ListOffsetsAfterMilli(ctx, from.UnixMilli(), topics...)
	}
	if err != nil {
		return nil, fmt.Errorf("rebuild: start offsets of %v: %w", topics, err)
	}
	pos := &positions{group: group, topics: topics}
	var errs []error
	ends.Each(func(e kadm.ListedOffset) {
		p := &partition{topic: e.Topic, partition: e.Partition, end: e.Offset, start: -1}
		if c, ok := committed.Lookup(e.Topic, e.Partition); ok && c.Err == nil && c.At >= 0 {
			p.start = c.At
			pos.resumed = true
		} else if r, ok := resets.Lookup(e.Topic, e.Partition); ok && r.Err == nil && r.Offset >= 0 {
			p.start = r.Offset
		} else {
			errs = append(errs, fmt.Errorf("rebuild: no start offset for %s/%d", e.Topic, e.Partition))
		}
		p.at = p.start
		pos.parts = append(pos.parts, p)
	})
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	sort.Slice(pos.parts, func(i, j int) bool {
		a, b := pos.parts[i], pos.parts[j]
		if a.topic != b.topic {
			return a.topic < b.topic
		}
		return a.partition < b.partition
	})
	return pos, nil
}

// poll reads the group's committed offsets.
func (p *positions) poll(ctx context.Context, adm *kadm.Client) error {
	committed, err := fetchCommitted(ctx, adm, p.group, p.topics)
	if err != nil {
		return err
	}
	for _, pt := range p.parts {
		pt.moved = false
		if c, ok := committed.Lookup(pt.topic, pt.partition); ok && c.Err == nil && c.At > pt.at {
			pt.at, pt.moved, pt.checked = c.At, true, false
		}
	}
	return nil
}

// errRecordLeft ends settle's read at the first record a consumer is given.
var errRecordLeft = errors.New("a record is left")

// settle reads, for each partition whose committed offset stopped short of
// its end offset (it did not move at the last poll), what is left below the
// end offset, once per committed offset: when that is only transaction
// markers the partition is done. A consumer group commits the offset after
// the last record it was given, never past a marker, so a partition written
// in transactions (the ingress's events, forwarded by its claims) ends one
// or more offsets beyond what the group will ever commit. opts are the
// reading client's (brokers, TLS, SASL).
func (p *positions) settle(ctx context.Context, opts []kgo.Opt) error {
	for _, pt := range p.parts {
		if pt.at >= pt.end || pt.moved || pt.checked {
			continue
		}
		rng := map[string]map[int32]topicread.Range{pt.topic: {pt.partition: {Start: pt.at, End: pt.end}}}
		err := topicread.Partitions(ctx, opts, rng, topicread.Options{}, func(*kgo.Record) error { return errRecordLeft })
		switch {
		case err == nil:
			pt.markers = true
		case !errors.Is(err, errRecordLeft):
			return err
		}
		pt.checked = true
	}
	return nil
}

// done reports whether every partition reached its end offset, or has
// only transaction markers left below it (settle).
func (p *positions) done() bool {
	for _, pt := range p.parts {
		if pt.at < pt.end && !pt.markers {
			return false
		}
	}
	return true
}

// total is the records between the start and the end offsets.
func (p *positions) total() int64 {
	return p.sum(func(pt *partition) int64 { return max(pt.end-pt.start, 0) })
}

// progress is the part of total already behind the committed offsets (all
// of a partition with only markers left).
func (p *positions) progress() int64 {
	return p.sum(func(pt *partition) int64 {
		if pt.markers {
			return max(pt.end-pt.start, 0)
		}
		return min(max(pt.at-pt.start, 0), max(pt.end-pt.start, 0))
	})
}

// consumed is how many input offsets the group committed past the start.
func (p *positions) consumed() int64 {
	return p.sum(func(pt *partition) int64 { return max(pt.at-pt.start, 0) })
}

// sum adds f over the partitions.
func (p *positions) sum(f func(*partition) int64) int64 {
	var n int64
	for _, pt := range p.parts {
		n += f(pt)
	}
	return n
}

// fetchCommitted returns the group's committed offsets; a group that does
// not exist yet has none (some brokers answer GROUP_ID_NOT_FOUND).
func fetchCommitted(ctx context.Context, adm *kadm.Client, group string, topics []string) (kadm.OffsetResponses, error) {
	committed, err := adm.FetchOffsetsForTopics(ctx, group, topics...)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return kadm.OffsetResponses{}, nil
	}
	return committed, err
}

// checkAccess checks, before the end offsets are captured, the permissions
// that capture and the replay need on the inputs and the rebuild's group,
// so that a missing one is named (acl.Check); the rebuild's processor
// checks the rest as it starts (docs/operations.md#kafka-acls).
func checkAccess(ctx context.Context, cl *kgo.Client, group string, inputs []string) error {
	needs := []acl.Need{acl.Group(group, kmsg.ACLOperationRead, "run the rebuild's consumer group")}
	for _, in := range inputs {
		needs = append(needs, acl.Topic(in, kmsg.ACLOperationRead, "replay it"))
	}
	if _, err := acl.Check(ctx, cl, needs); err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	return nil
}
