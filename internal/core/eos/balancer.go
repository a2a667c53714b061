package eos

/*
The standby balancer (issue 26) is the group balancer used when standby
replicas are on: every task (input partition) has one active member, which
processes it, and up to `replicas` standby members, which tail its changelog
into their own stores so that a takeover restores only the delta
(docs/design.md#changelog-closes-gap: a store restores from its own changelog
offset, so the member whose store is furthest along reads the least).

Each member's join metadata carries, in the UserData of a version 3
kmsg.ConsumerMemberMetadata (the version kgo's cooperative-sticky sends), the
next changelog offset its store holds per task (its "position"). The leader
plans (plan, balancer_plan.go):

 1. every partition of every topic some member is interested in goes to
    exactly one member interested in that topic;
 2. balance: with n tasks and m members of the same interests each member gets
    floor(n/m) or ceil(n/m), exactly n mod m of them ceil (mixed interests:
    each member's fair share of every topic it reads, see quotas);
 3. a task stays with its current owner while the owner is within the balance
    rule (stickiness: a kept task needs no restore at all and no cooperative
    revoke round); otherwise it goes to the member with the highest position
    for it, a member without state ranking below any with state; ties go to
    the member with fewest tasks so far, then to member order;
 4. each task gets min(replicas, interested members − 1) standby members,
    never its active member, each at most once: highest position first (state
    beats no state: it is the least to catch up), then fewest standby tasks so
    far, then member order. A standby's earlier assignment needs no other
    stickiness: a standby that has state has a position.

The plan's standby tasks travel in the UserData of each member's
kmsg.ConsumerMemberAssignment; ParseSyncAssignment hands them to the loop
(assigned) on every sync, an empty list included.

Cooperative: the loop relies on cooperative revokes (a member keeps
processing what it keeps during a rebalance, and revoke means "this task
only"), so the plan goes through BalancePlan.AdjustCooperative: a task moving
from A to B is withheld from B until A has revoked it and rejoined. The
balancer is listed before kgo.CooperativeStickyBalancer, so a rolling
upgrade from cooperative-sticky stays cooperative throughout: the group uses
cooperative-sticky until every member offers projector-standby-v1. A change
of the data encoding must change the protocol name (…-v2) for the same
reason: a leader balances a member whose positions it cannot decode as one
without state (and warns), which is right only if nothing misread them.

Why it is used only when standbys are on: its join metadata changes as
positions move, and Kafka compares join metadata byte for byte. What Apache
Kafka's classic-protocol coordinator does with a changed metadata:
  - a known member (its member id still valid) rejoining a Stable group with
    different metadata triggers a rebalance: classicGroupJoinExistingMember
    rebalances when !member.matches(protocols), a byte comparison of the
    protocol metadata (described in apache/kafka PR #22593, KAFKA-12759).
    kgo only rejoins when a rebalance is under way or it must (a cooperative
    revoke, a metadata change it saw as leader), so positions moving between
    rebalances do not trigger one by themselves; a rejoin that happens
    anyway carries the fresh positions;
  - a static member restarting (group.instance.id known, member id unknown;
    projector's members are static, decision 006) into a Stable group is not
    rebalanced unless the group's selected protocol would change: it gets its
    old assignment back, standby list included, and its new metadata is stored
    without a rebalance (KAFKA-10284, apache/kafka PR #9270 in
    GroupCoordinator.scala; the same rule in the Java GroupMetadataManager,
    PR #13870). The positions a restarted static member brings are therefore
    seen only at the next rebalance. PR #22593 (open in 2026-06) would
    rebalance such a rejoin when its subscription changed. kfake differs:
    replaceStaticMember (pkg/kfake/groups.go) rebalances whenever the join
    differs byte for byte (sameJoin), so under kfake a restart with moved
    positions does rebalance.
With positions that never change (no standbys: nothing is tailed, and an
active task's position moves with every transaction) the metadata would
churn for nothing; cooperative-sticky's does not.

kgo calls positions (JoinGroupMetadata) and assigned (ParseSyncAssignment) on
its group goroutine: both must be safe to call concurrently with the loop.
*/

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/core/state"
)

// standbyProtocol is the balancer's protocol name. The "-v1" names the
// UserData encoding: a new encoding is a new protocol (see above).
const standbyProtocol = "projector-standby-v1"

// errStandbyData reports UserData of the standby balancer that does not
// decode (a member's positions, or a member's standby tasks).
var errStandbyData = errors.New("eos: undecodable standby balancer data")

type standbyBalancer struct {
	replicas  int
	positions func() map[state.Task]int64
	assigned  func(standby []state.Task)
	warn      func(error)
}

// newStandbyBalancer returns the group balancer used when standby replicas are on.
// replicas: standby copies per task (≥1). positions: called when joining; returns the next changelog
// offset the local store holds for each task it has state for (tasks absent: no state). assigned: called
// with this member's standby tasks on every sync (from ParseSyncAssignment), possibly empty. warn
// (nil: none) hears of a member whose positions do not decode, which the balance then treats as
// having none.
func newStandbyBalancer(replicas int, positions func() map[state.Task]int64, assigned func(standby []state.Task), warn func(error)) kgo.GroupBalancer {
	return &standbyBalancer{replicas: max(replicas, 0), positions: positions, assigned: assigned, warn: warn}
}

func (*standbyBalancer) ProtocolName() string { return standbyProtocol }

// IsCooperative is true: see the file comment.
func (*standbyBalancer) IsCooperative() bool { return true }

// JoinGroupMetadata is what cooperative-sticky sends (version 3: topics,
// owned partitions, generation) with the store's positions as UserData. The
// output is deterministic (owned topics and positions sorted): the
// coordinator compares it byte for byte.
func (b *standbyBalancer) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = interests
	meta.Generation = generation
	for _, topic := range slices.Sorted(maps.Keys(current)) {
		owned := kmsg.NewConsumerMemberMetadataOwnedPartition()
		owned.Topic = topic
		owned.Partitions = slices.Sorted(slices.Values(current[topic]))
		meta.OwnedPartitions = append(meta.OwnedPartitions, owned)
	}
	if b.positions != nil {
		meta.UserData = encodePositions(b.positions())
	}
	return meta.AppendTo(nil)
}

// ParseSyncAssignment returns the active partitions and hands the standby
// tasks to assigned (nil when there are none). An empty assignment (a member
// the leader did not plan for) is nothing active and nothing standby.
func (b *standbyBalancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	active := make(map[string][]int32)
	var standby []state.Task
	if len(assignment) > 0 {
		var a kmsg.ConsumerMemberAssignment
		if err := a.ReadFrom(assignment); err != nil {
			return nil, fmt.Errorf("eos: standby balancer: sync assignment: %w", err)
		}
		var err error
		if standby, err = decodeTasks(a.UserData); err != nil {
			return nil, fmt.Errorf("eos: standby balancer: standby tasks of the sync assignment: %w", err)
		}
		for _, t := range a.Topics {
			active[t.Topic] = append(active[t.Topic], t.Partitions...)
		}
	}
	if b.assigned != nil {
		b.assigned(standby)
	}
	return active, nil
}

// MemberBalancer decodes every member's metadata and positions. A member
// whose metadata does not decode fails the balance, named (kgo cannot tell
// its topics either); one whose positions do not decode is balanced as a
// member without state, and warn names it: positions only order the
// preference, and failing the balance would leave the whole group without
// partitions until that member changed.
func (b *standbyBalancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	r := &standbyRound{replicas: b.replicas}
	cb, err := kgo.NewConsumerBalancer(r, members)
	if err != nil {
		return nil, nil, fmt.Errorf("eos: standby balancer: %s: %w", unreadableMember(members), err)
	}
	cb.EachMember(func(jm *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		pos, err := decodePositions(meta.UserData)
		if err != nil && b.warn != nil {
			b.warn(fmt.Errorf("eos: standby balancer: positions of %s, balanced as a member without state: %w", memberName(jm), err))
		}
		m := member{id: jm.MemberID, topics: meta.Topics, generation: meta.Generation, positions: pos}
		for _, o := range meta.OwnedPartitions {
			for _, p := range o.Partitions {
				m.owned = append(m.owned, state.Task{Topic: o.Topic, Partition: p})
			}
		}
		r.members = append(r.members, m)
	})
	return cb, cb.MemberTopics(), nil
}

// memberName names a member for an error: its member id and, if static, its
// instance id.
func memberName(m *kmsg.JoinGroupResponseMember) string {
	if m.InstanceID != nil {
		return fmt.Sprintf("member %q (instance %q)", m.MemberID, *m.InstanceID)
	}
	return fmt.Sprintf("member %q", m.MemberID)
}

// unreadableMember names the first member whose metadata does not read
// (kgo's NewConsumerBalancer reports the error without the member).
func unreadableMember(members []kmsg.JoinGroupResponseMember) string {
	for i := range members {
		var meta kmsg.ConsumerMemberMetadata
		if meta.ReadFrom(slices.Clone(members[i].ProtocolMetadata)) != nil {
			return memberName(&members[i])
		}
	}
	return "a member"
}

// standbyRound is one rebalance's balance, over the members MemberBalancer
// decoded (in kgo's order: instance id, then member id).
type standbyRound struct {
	replicas int
	members  []member
}

// Balance plans, withholds what moves until its owner revoked it
// (AdjustCooperative), and encodes per member its active partitions and, as
// UserData, its standby tasks; members in order.
func (r *standbyRound) Balance(cb *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	active, standby := plan(r.members, topics, r.replicas)
	p := cb.NewPlan()
	for i := range cb.Members() {
		jm := &cb.Members()[i]
		for _, t := range active[jm.MemberID] {
			p.AddPartition(jm, t.Topic, t.Partition)
		}
	}
	p.AdjustCooperative(cb)
	adjusted := p.AsMemberIDMap()
	out := make(syncAssignment, 0, len(r.members))
	for _, m := range r.members {
		a := kmsg.NewConsumerMemberAssignment()
		for _, topic := range slices.Sorted(maps.Keys(adjusted[m.id])) {
			if parts := adjusted[m.id][topic]; len(parts) > 0 {
				at := kmsg.NewConsumerMemberAssignmentTopic()
				at.Topic = topic
				at.Partitions = slices.Sorted(slices.Values(parts))
				a.Topics = append(a.Topics, at)
			}
		}
		a.UserData = encodeTasks(standby[m.id])
		sa := kmsg.NewSyncGroupRequestGroupAssignment()
		sa.MemberID = m.id
		sa.MemberAssignment = a.AppendTo(nil)
		out = append(out, sa)
	}
	return out
}

type syncAssignment []kmsg.SyncGroupRequestGroupAssignment

func (s syncAssignment) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment { return s }

// compareTasks orders tasks by topic, then partition.
func compareTasks(a, b state.Task) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

// standbyDataVersion is the first byte of both UserData encodings.
const standbyDataVersion = 1

// The encodings, grouped by topic:
//
//	positions: version, uvarint topics, per topic: uvarint length, name,
//	           uvarint partitions, per partition: varint partition, varint offset
//	tasks:     the same without the offsets
//
// encodePositions sorts by topic then partition, so equal positions give
// equal bytes (the coordinator compares join metadata byte for byte).
func encodePositions(pos map[state.Task]int64) []byte {
	tasks := slices.SortedFunc(maps.Keys(pos), compareTasks)
	return encodeGrouped(tasks, func(dst []byte, t state.Task) []byte { return binary.AppendVarint(dst, pos[t]) })
}

// encodeTasks encodes standby tasks, sorted; none is no bytes.
func encodeTasks(tasks []state.Task) []byte {
	if len(tasks) == 0 {
		return nil
	}
	tasks = slices.SortedFunc(slices.Values(tasks), compareTasks)
	return encodeGrouped(tasks, func(dst []byte, _ state.Task) []byte { return dst })
}

// encodeGrouped writes sorted tasks grouped by topic; each appends what
// follows a task's partition.
func encodeGrouped(tasks []state.Task, each func([]byte, state.Task) []byte) []byte {
	dst := []byte{standbyDataVersion}
	var topics int
	for i := range tasks {
		if i == 0 || tasks[i].Topic != tasks[i-1].Topic {
			topics++
		}
	}
	dst = binary.AppendUvarint(dst, uint64(topics))
	for i := 0; i < len(tasks); {
		j := i
		for j < len(tasks) && tasks[j].Topic == tasks[i].Topic {
			j++
		}
		dst = binary.AppendUvarint(dst, uint64(len(tasks[i].Topic)))
		dst = append(dst, tasks[i].Topic...)
		dst = binary.AppendUvarint(dst, uint64(j-i))
		for _, t := range tasks[i:j] {
			dst = binary.AppendVarint(dst, int64(t.Partition))
			dst = each(dst, t)
		}
		i = j
	}
	return dst
}

// decodePositions decodes encodePositions; no bytes is no positions.
func decodePositions(b []byte) (map[state.Task]int64, error) {
	pos := make(map[state.Task]int64)
	err := decodeGrouped(b, func(r *dataReader, t state.Task) error {
		if _, dup := pos[t]; dup {
			return fmt.Errorf("%w: task %s twice", errStandbyData, t)
		}
		off, err := r.varint("offset of " + t.String())
		pos[t] = off
		return err
	})
	if err != nil {
		return nil, err
	}
	return pos, nil
}

// decodeTasks decodes encodeTasks, in the order encoded; no bytes, or no
// tasks, is nil.
func decodeTasks(b []byte) ([]state.Task, error) {
	var tasks []state.Task
	seen := make(map[state.Task]bool)
	err := decodeGrouped(b, func(_ *dataReader, t state.Task) error {
		if seen[t] {
			return fmt.Errorf("%w: task %s twice", errStandbyData, t)
		}
		seen[t] = true
		tasks = append(tasks, t)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return tasks, nil
}

// decodeGrouped reads encodeGrouped's layout, calling each after a task's
// partition. A count larger than the bytes left is refused before anything
// is allocated for it.
func decodeGrouped(b []byte, each func(*dataReader, state.Task) error) error {
	if len(b) == 0 {
		return nil
	}
	if b[0] != standbyDataVersion {
		return fmt.Errorf("%w: version %d, want %d", errStandbyData, b[0], standbyDataVersion)
	}
	r := &dataReader{b: b, off: 1}
	topics, err := r.count("topic count")
	for i := 0; err == nil && i < topics; i++ {
		var n int
		if n, err = r.count(fmt.Sprintf("length of topic %d", i)); err != nil {
			break
		}
		topic := string(r.b[r.off : r.off+n])
		r.off += n
		var parts int
		if parts, err = r.count(fmt.Sprintf("partition count of topic %q", topic)); err != nil {
			break
		}
		for j := 0; err == nil && j < parts; j++ {
			var p int64
			if p, err = r.varint(fmt.Sprintf("partition %d of topic %q", j, topic)); err != nil {
				break
			}
			if p < 0 || p > 1<<31-1 {
				return fmt.Errorf("%w: partition %d of topic %q out of range", errStandbyData, p, topic)
			}
			err = each(r, state.Task{Topic: topic, Partition: int32(p)})
		}
	}
	if err == nil && r.off != len(r.b) {
		err = fmt.Errorf("%w: %d bytes after the last topic", errStandbyData, len(r.b)-r.off)
	}
	return err
}

// dataReader reads varints, naming what it read in its errors.
type dataReader struct {
	b   []byte
	off int
}

func (r *dataReader) varint(what string) (int64, error) {
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		return 0, fmt.Errorf("%w: truncated at byte %d reading %s", errStandbyData, r.off, what)
	}
	r.off += n
	return v, nil
}

// count reads a uvarint that counts bytes or items still to come: at most
// the bytes left (every item takes at least one).
func (r *dataReader) count(what string) (int, error) {
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		return 0, fmt.Errorf("%w: truncated at byte %d reading %s", errStandbyData, r.off, what)
	}
	r.off += n
	if v > uint64(len(r.b)-r.off) {
		return 0, fmt.Errorf("%w: %s is %d, only %d bytes left", errStandbyData, what, v, len(r.b)-r.off)
	}
	return int(v), nil
}
