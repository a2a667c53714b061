package acl

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/projector-dev/projector/internal/app/broker"
)

const (
	read, write, create = kmsg.ACLOperationRead, kmsg.ACLOperationWrite, kmsg.ACLOperationCreate
	describe, descCfg   = kmsg.ACLOperationDescribe, kmsg.ACLOperationDescribeConfigs
)

// cluster starts kfake with SASL and ACLs enforced, topics t1, t2 and
// secret existing, and a user "u" holding acls; it returns u's client.
func cluster(t *testing.T, acls ...kfake.ACL) *kgo.Client {
	t.Helper()
	c, err := broker.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.EnableACLs(),
		kfake.Superuser("SCRAM-SHA-256", "admin", "pw"), kfake.User("SCRAM-SHA-256", "u", "pw", acls...),
		kfake.SeedTopics(1, "t1", "t2", "secret"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.SASL(scram.Auth{User: "u", Pass: "pw"}.AsSha256Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func allow(rt kmsg.ACLResourceType, name string, op kmsg.ACLOperation) kfake.ACL {
	return kfake.ACL{Resource: rt, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
}

// TestCheck: Check reports exactly the needs the broker's authorizer
// refuses, implied operations, prefixed patterns and deny rules included;
// a topic that does not exist (but may be described) is absent, not
// missing; a topic that may not be described lacks everything asked of it.
func TestCheck(t *testing.T) {
	topic, group := kmsg.ACLResourceTypeTopic, kmsg.ACLResourceTypeGroup
	cl := cluster(t,
		allow(topic, "t1", read),                          // implies Describe
		allow(topic, "t1", kmsg.ACLOperationAlterConfigs), // implies DescribeConfigs
		kfake.ACL{Resource: topic, Name: "t", Pattern: kmsg.ACLResourcePatternTypePrefixed, Operation: write, Allow: true},
		kfake.ACL{Resource: topic, Name: "t2", Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: write, Allow: false},
		allow(topic, "new", describe),
		allow(group, "g", read),
	)
	needs := []Need{
		Topic("t1", read, "r"), Topic("t1", describe, "d"), Topic("t1", descCfg, "c"), Topic("t1", write, "w (prefix t)"),
		Topic("t2", write, "denied"), Topic("t2", describe, "implied by the prefixed Write"),
		Topic("secret", read, "nothing granted"), Topic("secret", write, "nothing granted"),
		Topic("new", write, "absent"),
		Group("g", read, "r"), Group("g", describe, "implied"), Group("other", read, "nothing granted"),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	absent, err := Check(ctx, cl, needs)
	var de *DeniedError
	if !errors.As(err, &de) {
		t.Fatalf("Check: %v, want a *DeniedError", err)
	}
	var got []string
	for _, n := range de.Needs {
		got = append(got, n.String())
	}
	want := []string{`Write on topic "t2"`, `Read on topic "secret"`, `Write on topic "secret"`, `Read on group "other"`}
	if !slices.Equal(got, want) {
		t.Errorf("missing %q\nwant    %q", got, want)
	}
	if !slices.Equal(absent, []string{"new"}) {
		t.Errorf("absent %q, want [new]", absent)
	}
	if _, err := Check(ctx, cl, needs[:4]); err != nil {
		t.Errorf("granted needs reported: %v", err)
	}
}

// TestCheckWithoutACLs: a broker that does not enforce ACLs lets every
// operation through, and Check finds nothing missing.
func TestCheckWithoutACLs(t *testing.T) {
	c, err := broker.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := Check(context.Background(), cl, []Need{Topic("t1", read, ""), Topic("t1", descCfg, ""), Group("g", read, "")}); err != nil {
		t.Fatal(err)
	}
}

// TestUnreportedIsNotMissing: a broker that does not compute authorized
// operations (before Kafka 2.3) says nothing about them; Check must not
// call them missing.
func TestUnreportedIsNotMissing(t *testing.T) {
	needs := []Need{Topic("a", read, ""), Topic("b", read, ""), Topic("c", read, "")}
	got := lacking(needs, kmsg.ACLResourceTypeTopic, map[string]int32{"a": unreported, "b": 1 << int32(read), "c": 0})
	if len(got) != 1 || got[0].Name != "c" {
		t.Fatalf("lacking %v, want only c", got)
	}
}

// TestDenied: only authorization errors are turned into a *DeniedError,
// which keeps the broker's error for errors.Is and names every need.
func TestDenied(t *testing.T) {
	for _, err := range []error{kerr.TopicAuthorizationFailed, kerr.GroupAuthorizationFailed,
		kerr.TransactionalIDAuthorizationFailed, kerr.ClusterAuthorizationFailed, &kadm.AuthError{Err: kerr.TopicAuthorizationFailed}} {
		d := Denied(fmt.Errorf("wrapped: %w", err), Topic("t", write, "send it"), TransactionalID("p-1", "run transactions"))
		var de *DeniedError
		if !errors.As(d, &de) || !errors.Is(d, err) {
			t.Fatalf("Denied(%v) = %v", err, d)
		}
		want := `not authorized: the Kafka principal needs Write on topic "t" (to send it), Write on transactional id "p-1" (to run transactions); grant them (docs/operations.md#kafka-acls): wrapped: `
		if got := d.Error(); len(got) < len(want) || got[:len(want)] != want {
			t.Errorf("message %q\nwant prefix %q", got, want)
		}
		if Denied(d, Topic("x", read, "")) != d {
			t.Error("a *DeniedError was wrapped again")
		}
	}
	other := errors.New("broker away")
	if Denied(other, Topic("t", read, "")) != other || Denied(nil, Topic("t", read, "")) != nil {
		t.Error("a non-authorization error was changed")
	}
}
