package eos

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/core/acl"
)

// The Kafka permissions the loop needs (docs/operations.md#kafka-acls),
// checked before it starts: a principal without one stops Run at once with
// an error naming it, also for one used only now and then (a dead letter),
// rather than failing later with a bare authorization error.

// needs lists the permissions on topics and the group that the loop uses,
// and the user's own (Config.Needs). The transactional id's Write is
// checked by the producer's initialisation (initProducer), and Create by
// the creation of a missing topic (EnsureTopics).
func (l *Loop[T]) needs() []acl.Need {
	const (
		read, write = kmsg.ACLOperationRead, kmsg.ACLOperationWrite
		describeCfg = kmsg.ACLOperationDescribeConfigs
	)
	n := []acl.Need{acl.Group(l.cfg.Group, read, "join the consumer group and commit offsets")}
	for _, in := range l.cfg.Inputs {
		cl := l.cfg.ChangelogOf(in)
		n = append(n, acl.Topic(in, read, "consume it"),
			acl.Topic(cl, read, "restore state from it"), acl.Topic(cl, write, "record state in it"),
			acl.Topic(cl, describeCfg, "read its delete.retention.ms, docs/decisions/007"))
	}
	n = append(n, acl.Topic(l.cfg.DeadLetterTopic, write, "write dead letters"))
	for _, o := range l.cfg.OutputTopics {
		n = append(n, acl.Topic(o.Name, write, "produce to it"))
	}
	return append(n, l.cfg.Needs...)
}

// checkAccess runs acl.Check for the loop's needs with cl, only for the
// topics in only when it is not nil (the ones created since the last
// check). It returns the topics of the needs that do not exist yet.
func (l *Loop[T]) checkAccess(ctx context.Context, cl *kgo.Client, only []string) ([]string, error) {
	needs := l.needs()
	if only != nil {
		needs = slices.DeleteFunc(needs, func(n acl.Need) bool {
			return n.Resource != kmsg.ACLResourceTypeTopic || !slices.Contains(only, n.Name)
		})
		if len(needs) == 0 {
			return nil, nil
		}
	}
	absent, err := acl.Check(ctx, cl, needs)
	if err != nil {
		return nil, fmt.Errorf("eos: group %s cannot start: %w", l.cfg.Group, err)
	}
	return absent, nil
}

// groupDenied names Read on the group when joining it was refused. The
// check at start sees the group only where the broker reports its
// authorized operations; one that does not (before Kafka 2.3, or for a group
// that does not exist yet) lets the refusal come from the join instead.
func (l *Loop[T]) groupDenied(err error) error {
	if !errors.Is(err, kerr.GroupAuthorizationFailed) {
		return err
	}
	return fmt.Errorf("eos: group %s: %w", l.cfg.Group,
		acl.Denied(err, acl.Group(l.cfg.Group, kmsg.ACLOperationRead, "join the consumer group and commit offsets")))
}
