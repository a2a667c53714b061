package ingress

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/runtime/acl"
	"github.com/projector-dev/projector/internal/runtime/eos"
)

// checkAccess makes sure, before the ingress serves, that its principal
// has the Kafka permissions it needs (docs/operations.md#kafka-acls): Create
// on the receipts topic when it is missing, Write on the events topic (used
// by the first POST only), Read on the receipts topic. A missing one stops
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
		acl.Topic(s.cfg.Topic, kmsg.ACLOperationWrite, "write the events it ingests"),
		acl.Topic(s.cfg.ReceiptsTopic, kmsg.ACLOperationRead, "read the receipts it answers from"),
	}
	// Checked before the receipts topic is created (a topic the principal
	// may not describe fails its listing as a whole), and again once it is.
	absent, err := acl.Check(cctx, cl, needs)
	if err == nil && len(absent) > 0 {
		err = eos.EnsureTopics(cctx, kadm.NewClient(cl), []eos.TopicSpec{s.receiptsSpec()}, s.cfg.Partitions)
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

// receiptsSpec is the receipts topic as the ingress creates it when missing.
func (s *Server) receiptsSpec() eos.TopicSpec {
	return eos.TopicSpec{Name: s.cfg.ReceiptsTopic, Compacted: true, MaxMessageBytes: eos.MaxBatchBytes(s.cfg.MaxRecordBytes)}
}
