package ops

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/core/acl"
	"github.com/projector-dev/projector/internal/core/jsonenc"
	"github.com/projector-dev/projector/processor"
)

// Sent is where a command record landed.
type Sent struct {
	Topic     string
	Partition int32
	Offset    int64
}

func (s Sent) String() string { return fmt.Sprintf("%s/%d@%d", s.Topic, s.Partition, s.Offset) }

// SkipGap produces a skip-gap command for aggregate. Each destination is an
// input topic and a partition; a partition < 0 means "by key", Kafka's
// default key partitioner (murmur2), which is where a well-keyed producer put
// the aggregate's events.
func SkipGap(ctx context.Context, brokers []string, opts []kgo.Opt, cmd processor.Command, dests []Sent) ([]Sent, error) {
	cmd.Op = "skip-gap"
	if cmd.Aggregate == "" {
		return nil, errors.New("ops: skip-gap needs an aggregate")
	}
	val, err := jsonenc.Marshal(cmd) // no HTML escaping in a record
	if err != nil {
		return nil, err
	}
	byKey := kgo.StickyKeyPartitioner(nil)
	part := kgo.BasicConsistentPartitioner(func(topic string) func(*kgo.Record, int) int {
		tp := byKey.ForTopic(topic)
		return func(r *kgo.Record, n int) int {
			if want, ok := r.Context.Value(partitionKey{}).(int32); ok && want >= 0 {
				return min(int(want), n-1) // checked above
			}
			return tp.Partition(r, n)
		}
	})
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(part)}, opts...)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	// Check the partitions first: a command must never land elsewhere.
	var topics []string
	for _, d := range dests {
		topics = append(topics, d.Topic)
	}
	td, err := kadm.NewClient(cl).ListTopics(ctx, topics...)
	if err != nil {
		return nil, fmt.Errorf("ops: describe %s: %w", strings.Join(topics, ", "), commandDenied(err, topics...))
	}
	for _, d := range dests {
		t, ok := td[d.Topic]
		if !ok {
			return nil, fmt.Errorf("ops: input topic %s does not exist", d.Topic)
		}
		if t.Err != nil {
			return nil, fmt.Errorf("ops: input topic %s: %w", d.Topic, commandDenied(t.Err, d.Topic))
		}
		if d.Partition >= int32(len(t.Partitions)) {
			return nil, fmt.Errorf("ops: %s has no partition %d", d.Topic, d.Partition)
		}
	}
	var recs []*kgo.Record
	for _, d := range dests {
		recs = append(recs, &kgo.Record{
			Topic: d.Topic, Key: []byte(cmd.Aggregate), Value: val,
			Headers: []kgo.RecordHeader{{Key: processor.HeaderCommand, Value: []byte(cmd.Op)}},
			Context: context.WithValue(ctx, partitionKey{}, d.Partition),
		})
	}
	res := cl.ProduceSync(ctx, recs...)
	if err := res.FirstErr(); err != nil {
		return nil, fmt.Errorf("ops: produce skip-gap command: %w", commandDenied(err, topics...))
	}
	// Results come in completion order; the records themselves are in ours.
	out := make([]Sent, 0, len(recs))
	for i, r := range recs {
		if want := dests[i].Partition; want >= 0 && r.Partition != want {
			return nil, fmt.Errorf("ops: %s has no partition %d", r.Topic, want)
		}
		out = append(out, Sent{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset})
	}
	return out, nil
}

type partitionKey struct{}

// GroupState is what the broker says about the processor's consumer group:
// whether a processor is running to apply a command.
type GroupState struct {
	State   string // Stable, Empty, Dead, …
	Members int
}

// Running reports whether the group has members.
func (g GroupState) Running() bool { return g.Members > 0 }

// DescribeGroup describes the processor's consumer group.
func DescribeGroup(ctx context.Context, brokers []string, opts []kgo.Opt, group string) (GroupState, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)...)
	if err != nil {
		return GroupState{}, err
	}
	defer cl.Close()
	gs, err := kadm.NewClient(cl).DescribeGroups(ctx, group)
	if err != nil {
		return GroupState{}, fmt.Errorf("ops: describe group %s: %w", group, describeDenied(err, group))
	}
	g, ok := gs[group]
	if !ok {
		return GroupState{State: "Dead"}, nil
	}
	if g.Err != nil {
		return GroupState{}, fmt.Errorf("ops: describe group %s: %w", group, describeDenied(g.Err, group))
	}
	return GroupState{State: g.State, Members: len(g.Members)}, nil
}

// ErrNotApplied reports a command the worker did not apply within the wait.
var ErrNotApplied = errors.New("ops: command not applied in time")

// Await is the wait half of every operator command: a command is a record
// the worker applies in its own time, so the tool polls the committed state
// (applied reads it) every interval until the command shows. It returns nil
// once applied reports true, ErrNotApplied when timeout has passed, and
// ctx.Err() when ctx ends first.
func Await(ctx context.Context, timeout, interval time.Duration, applied func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := applied()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return ErrNotApplied
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// commandDenied names what sending a command to topics needs: Write (which
// implies Describe, and on Kafka 2.8 and later the idempotent producer's
// permission too; docs/operations.md#kafka-acls).
func commandDenied(err error, topics ...string) error {
	var needs []acl.Need
	for _, t := range topics {
		needs = append(needs, acl.Topic(t, kmsg.ACLOperationWrite, "send the command"))
	}
	return acl.Denied(err, needs...)
}

// describeDenied names what asking whether a worker runs in group needs.
func describeDenied(err error, group string) error {
	return acl.Denied(err, acl.Group(group, kmsg.ACLOperationDescribe, "tell whether a worker runs to apply the command"))
}
