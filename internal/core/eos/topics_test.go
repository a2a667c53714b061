package eos

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/app/broker"
)

// TestEnsureTopicsPartitionsOf: a missing topic with PartitionsOf is
// created with that topic's partition count (the ingress's claims topic,
// sized like the topic its events go to); an existing one is taken with
// any count, where a changelog (CopartitionOf) must match its input.
func TestEnsureTopicsPartitionsOf(t *testing.T) {
	c, err := broker.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 3, 1, nil, "in"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 5, 1, nil, "old-claims"); err != nil {
		t.Fatal(err)
	}
	specs := []TopicSpec{{Name: "in", MustExist: true}, {Name: "claims", PartitionsOf: "in"}, {Name: "old-claims", PartitionsOf: "in"}}
	if err := EnsureTopics(ctx, adm, specs, 8); err != nil {
		t.Fatal(err)
	}
	if n, m := len(c.PartitionInfos("claims")), len(c.PartitionInfos("old-claims")); n != 3 || m != 5 {
		t.Fatalf("claims created with %d partitions (want 3, as in), old-claims has %d (want 5, as it was)", n, m)
	}
	err = EnsureTopics(ctx, adm, []TopicSpec{{Name: "in"}, {Name: "old-claims", CopartitionOf: "in"}}, 8)
	if err == nil || !strings.Contains(err.Error(), "co-partitioned") {
		t.Fatalf("a co-partitioned topic of another count: %v, want an error", err)
	}
}
