// Package acl names the Kafka permissions (ACLs) a part of projector needs
// and finds the missing ones, so that a principal without one stops the
// part at start or first use with an error naming the resource and the
// operation to grant (docs/operations.md#kafka-acls), instead of a bare
// TOPIC_AUTHORIZATION_FAILED, or a retry loop that never ends.
//
// Two ways in:
//
//   - Check asks the brokers, before a part starts, which operations its
//     principal may perform on the topics and groups it names (the
//     authorized operations of KIP-430, which the broker's authorizer
//     computes, deny rules, prefixes and hosts included), and returns a
//     *DeniedError listing every Need it lacks. So a permission used only
//     now and then (a dead letter, an outcome report after a revoke) is
//     missed at start, not when it is first used.
//   - Denied turns an authorization error a request met into a
//     *DeniedError naming what the request needed: for what Check cannot
//     see (transactional ids, topics still to be created, brokers that do
//     not report authorized operations) and for readers that fail at once
//     anyway.
//
// Neither changes what a part does when it is authorized.
package acl

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Need is one permission a part needs: an operation on a resource (a topic,
// a group, a transactional id), and what the part does with it.
type Need struct {
	Resource kmsg.ACLResourceType
	Name     string
	Op       kmsg.ACLOperation
	// For says what the part uses it for, in the message ("consume the
	// input").
	For string
}

// Topic is the need of op on a topic.
func Topic(name string, op kmsg.ACLOperation, purpose string) Need {
	return Need{Resource: kmsg.ACLResourceTypeTopic, Name: name, Op: op, For: purpose}
}

// Group is the need of op on a consumer group.
func Group(name string, op kmsg.ACLOperation, purpose string) Need {
	return Need{Resource: kmsg.ACLResourceTypeGroup, Name: name, Op: op, For: purpose}
}

// TransactionalID is the need of Write on a transactional id (which
// implies Describe): every transactional request needs it.
func TransactionalID(id, purpose string) Need {
	return Need{Resource: kmsg.ACLResourceTypeTransactionalId, Name: id, Op: kmsg.ACLOperationWrite, For: purpose}
}

// Operation names as kafka-acls.sh spells them.
var opNames = map[kmsg.ACLOperation]string{
	kmsg.ACLOperationAll:             "All",
	kmsg.ACLOperationRead:            "Read",
	kmsg.ACLOperationWrite:           "Write",
	kmsg.ACLOperationCreate:          "Create",
	kmsg.ACLOperationDelete:          "Delete",
	kmsg.ACLOperationAlter:           "Alter",
	kmsg.ACLOperationDescribe:        "Describe",
	kmsg.ACLOperationClusterAction:   "ClusterAction",
	kmsg.ACLOperationDescribeConfigs: "DescribeConfigs",
	kmsg.ACLOperationAlterConfigs:    "AlterConfigs",
	kmsg.ACLOperationIdempotentWrite: "IdempotentWrite",
}

// OpName is op as kafka-acls.sh spells it (Read, DescribeConfigs, …).
func OpName(op kmsg.ACLOperation) string {
	if s, ok := opNames[op]; ok {
		return s
	}
	return op.String()
}

// ResourceName is the resource type in words (topic, group, transactional
// id, cluster).
func ResourceName(t kmsg.ACLResourceType) string {
	switch t {
	case kmsg.ACLResourceTypeTopic:
		return "topic"
	case kmsg.ACLResourceTypeGroup:
		return "group"
	case kmsg.ACLResourceTypeTransactionalId:
		return "transactional id"
	case kmsg.ACLResourceTypeCluster:
		return "cluster"
	}
	return strings.ToLower(t.String())
}

// String is `<Op> on <resource> "<name>"`, e.g. `Read on topic "events"`.
func (n Need) String() string {
	if n.Resource == kmsg.ACLResourceTypeCluster {
		return OpName(n.Op) + " on the cluster"
	}
	return fmt.Sprintf("%s on %s %q", OpName(n.Op), ResourceName(n.Resource), n.Name)
}

// DeniedError reports permissions the principal lacks. errors.Is matches
// the broker's authorization error when one was met.
type DeniedError struct {
	Needs []Need
	// Err is the broker's answer to a refused request; nil when Check
	// found the permissions missing before anything was refused.
	Err error
}

func (e *DeniedError) Error() string {
	var b strings.Builder
	b.WriteString("not authorized: the Kafka principal needs ")
	for i, n := range e.Needs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(n.String())
		if n.For != "" {
			b.WriteString(" (to " + n.For + ")")
		}
	}
	if len(e.Needs) == 1 {
		b.WriteString("; grant it (docs/operations.md#kafka-acls)")
	} else {
		b.WriteString("; grant them (docs/operations.md#kafka-acls)")
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *DeniedError) Unwrap() error { return e.Err }

// IsAuthorization reports whether err is a broker's authorization error.
func IsAuthorization(err error) bool {
	return errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.GroupAuthorizationFailed) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed)
}

// Denied returns a *DeniedError naming needs when err is an authorization
// error (the request that met it needed them), and err unchanged otherwise.
func Denied(err error, needs ...Need) error {
	var de *DeniedError
	if err == nil || !IsAuthorization(err) || errors.As(err, &de) {
		return err
	}
	return &DeniedError{Needs: needs, Err: err}
}
