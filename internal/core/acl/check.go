package acl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// unreported is the authorized-operations value of a broker that did not
// compute them (before Kafka 2.3, or not asked): nothing can be concluded.
const unreported = math.MinInt32

// Check asks the brokers, with cl, which operations the client's principal
// may perform on the topics and groups of needs, and returns a *DeniedError
// listing every need it lacks (nil when none). It cannot see, and skips:
// needs on topics that do not exist (yet: their creation needs Create,
// which the creating request checks), on transactional ids and on the
// cluster, and on resources whose operations the broker does not report.
// Absent lists the topics of needs that do not exist. Any other error (a
// broker away) is returned wrapped: nothing could be concluded.
func Check(ctx context.Context, cl *kgo.Client, needs []Need) (absent []string, err error) {
	var missing []Need
	topics, groups := names(needs, kmsg.ACLResourceTypeTopic), names(needs, kmsg.ACLResourceTypeGroup)
	if len(topics) > 0 {
		ops, gone, err := topicOps(ctx, cl, topics)
		if err != nil {
			return nil, err
		}
		absent = gone
		missing = append(missing, lacking(needs, kmsg.ACLResourceTypeTopic, ops)...)
	}
	for _, g := range groups {
		ops, err := groupOps(ctx, cl, g)
		if err != nil {
			return absent, err
		}
		missing = append(missing, lacking(needs, kmsg.ACLResourceTypeGroup, map[string]int32{g: ops})...)
	}
	if len(missing) > 0 {
		return absent, &DeniedError{Needs: missing}
	}
	return absent, nil
}

// names lists the distinct resource names of type t in needs, in order.
func names(needs []Need, t kmsg.ACLResourceType) []string {
	var out []string
	for _, n := range needs {
		if n.Resource == t && !slices.Contains(out, n.Name) {
			out = append(out, n.Name)
		}
	}
	return out
}

// lacking returns the needs of type t whose operation is not in ops (a bit
// field per resource name, bit i for operation i; 0: none, the resource
// cannot even be described). Resources absent from ops are skipped.
func lacking(needs []Need, t kmsg.ACLResourceType, ops map[string]int32) []Need {
	var out []Need
	for _, n := range needs {
		bits, ok := ops[n.Name]
		if n.Resource != t || !ok || bits == unreported {
			continue
		}
		if bits&(1<<int32(n.Op)) == 0 {
			out = append(out, n)
		}
	}
	return out
}

// topicOps returns the authorized operations of each existing topic (0 for
// one the principal may not describe) and the topics that do not exist.
func topicOps(ctx context.Context, cl *kgo.Client, topics []string) (map[string]int32, []string, error) {
	req := kmsg.NewPtrMetadataRequest()
	req.IncludeTopicAuthorizedOperations = true
	for _, t := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(t)
		req.Topics = append(req.Topics, rt)
	}
	// The client's cached metadata path first: it fails within a couple of
	// seconds when the client cannot talk to the brokers at all (rejected
	// SASL credentials, brokers away), where a direct request retries for
	// about 25 s. It does not carry authorized operations, so the direct
	// request follows.
	if _, err := cl.RequestCachedMetadata(ctx, req, 0); err != nil {
		return nil, nil, fmt.Errorf("acl: metadata of %v: %w", topics, err)
	}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return nil, nil, fmt.Errorf("acl: metadata of %v: %w", topics, err)
	}
	ops := map[string]int32{}
	var absent []string
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		switch err := kerr.ErrorForCode(t.ErrorCode); {
		case errors.Is(err, kerr.TopicAuthorizationFailed):
			ops[*t.Topic] = 0
		case errors.Is(err, kerr.UnknownTopicOrPartition):
			absent = append(absent, *t.Topic)
		default:
			// Other errors (a leader being elected) do not change what
			// the principal may do.
			ops[*t.Topic] = t.AuthorizedOperations
		}
	}
	return ops, absent, nil
}

// groupOps returns the authorized operations of a group (existing or not; 0
// when the principal may not describe it).
func groupOps(ctx context.Context, cl *kgo.Client, group string) (int32, error) {
	req := kmsg.NewPtrDescribeGroupsRequest()
	req.Groups = []string{group}
	req.IncludeAuthorizedOperations = true
	resp, err := req.RequestWith(ctx, cl)
	if errors.Is(err, kerr.GroupAuthorizationFailed) {
		return 0, nil // finding the group's coordinator needs Describe
	}
	if err != nil {
		return 0, fmt.Errorf("acl: describe group %s: %w", group, err)
	}
	for _, g := range resp.Groups {
		if g.Group != group {
			continue
		}
		if errors.Is(kerr.ErrorForCode(g.ErrorCode), kerr.GroupAuthorizationFailed) {
			return 0, nil
		}
		return g.AuthorizedOperations, nil
	}
	return unreported, nil
}
