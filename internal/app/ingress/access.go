package ingress

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/core/acl"
	"github.com/projector-dev/projector/internal/core/eos"
)

// checkAccess makes sure, before the ingress serves, that its principal
// has the Kafka permissions it needs (docs/operations.md#kafka-acls): Create
// on the receipts and claims topics when they are missing, Write on the
// claims topic (used by the first POST only), Read on the receipts topic,
// Describe on the events topic (the claims topic takes its partition count). A missing one stops
// Run with an error naming it, rather than a server that is never ready.
// Any other failure (brokers away) is left to ensureTopic and the receipts
// view, which retry it and report it in /readyz.
func (s *Server) checkAccess(ctx context.Context) error {
	cl, err := kgo.NewClient(s.clientOpts()...)
	if err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	defer cl.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	needs := []acl.Need{
		acl.Topic(s.cfg.ClaimsTopic, kmsg.ACLOperationWrite, "write the claims of the requests it ingests"),
		acl.Topic(s.cfg.ReceiptsTopic, kmsg.ACLOperationRead, "read the receipts it answers from"),
		acl.Topic(s.cfg.Topic, kmsg.ACLOperationDescribe, "give the claims topic its partition count"),
	}
	// Checked before the receipts and claims topics are created (a topic
	// the principal may not describe fails its listing as a whole), and
	// again once they are.
	absent, err := acl.Check(cctx, cl, needs)
	if err == nil && len(absent) > 0 {
		err = eos.EnsureTopics(cctx, kadm.NewClient(cl), s.topicSpecs(), s.cfg.Partitions)
		if err == nil {
			_, err = acl.Check(cctx, cl, needs)
		}
	}
	var denied *acl.DeniedError
	if errors.As(err, &denied) {
		return fmt.Errorf("ingress: %w", err)
	}
	if err != nil {
		s.cfg.Logger.Debug("ingress: permissions not checked; the receipts reader retries", "err", err)
	}
	return nil
}

// topicSpecs are the topics the ingress creates when missing (the
// processor does too, alike; whichever starts first): the receipts topic,
// and the claims topic, which takes the partition count of the topic the
// events go to; that one must exist (the processor creates it on the
// embedded broker, an operator on a real cluster).
func (s *Server) topicSpecs() []eos.TopicSpec {
	mb := eos.MaxBatchBytes(s.cfg.MaxRecordBytes)
	return []eos.TopicSpec{
		{Name: s.cfg.ReceiptsTopic, Compacted: true, MaxMessageBytes: mb},
		{Name: s.cfg.Topic, MustExist: true},
		{Name: s.cfg.ClaimsTopic, PartitionsOf: s.cfg.Topic, MaxMessageBytes: mb},
	}
}
