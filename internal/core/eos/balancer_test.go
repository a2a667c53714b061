package eos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/app/broker"
	"github.com/projector-dev/projector/internal/core/state"
	"github.com/projector-dev/projector/internal/harness/testkit"
)

func task(topic string, p int32) state.Task { return state.Task{Topic: topic, Partition: p} }

func tasksOf(topic string, ps ...int32) []state.Task {
	out := make([]state.Task, 0, len(ps))
	for _, p := range ps {
		out = append(out, task(topic, p))
	}
	return out
}

// checkPlan checks rules 1, 2 and 4 (balancer.go) for members that all read
// the topics of partitions, and returns who is active for each task.
func checkPlan(t *testing.T, members []member, partitions map[string]int32, replicas int,
	active, standby map[string][]state.Task) map[state.Task]string {
	t.Helper()
	ids := make(map[string]bool)
	for _, m := range members {
		ids[m.id] = true
	}
	owner := make(map[state.Task]string)
	var n int
	for topic, p := range partitions {
		n += int(p)
		for part := range p {
			owner[task(topic, part)] = ""
		}
	}
	for id, ts := range active {
		if !ids[id] {
			t.Fatalf("active tasks for unknown member %q", id)
		}
		for _, tk := range ts {
			prev, ok := owner[tk]
			if !ok {
				t.Fatalf("%s assigned %s, which is no task", id, tk)
			}
			if prev != "" {
				t.Fatalf("%s active on %s and %s", tk, prev, id)
			}
			owner[tk] = id
		}
	}
	for tk, id := range owner {
		if id == "" {
			t.Fatalf("%s has no active member: %v", tk, active)
		}
	}
	m := len(members)
	lo, hi, atHi := n/m, (n+m-1)/m, 0
	for _, mb := range members {
		c := len(active[mb.id])
		if c < lo || c > hi {
			t.Fatalf("%s has %d tasks, want %d..%d: %v", mb.id, c, lo, hi, active)
		}
		if c == hi && hi > lo {
			atHi++
		}
	}
	if hi > lo && atHi != n%m {
		t.Fatalf("%d members at %d tasks, want %d: %v", atHi, hi, n%m, active)
	}
	standbysOf := make(map[state.Task][]string)
	for id, ts := range standby {
		for _, tk := range ts {
			if owner[tk] == id {
				t.Fatalf("%s is standby and active for %s", id, tk)
			}
			if slices.Contains(standbysOf[tk], id) {
				t.Fatalf("%s standby twice for %s", id, tk)
			}
			standbysOf[tk] = append(standbysOf[tk], id)
		}
	}
	for tk := range owner {
		if got, want := len(standbysOf[tk]), min(replicas, m-1); got != want {
			t.Fatalf("%s has %d standbys %v, want %d", tk, got, standbysOf[tk], want)
		}
	}
	return owner
}

// TestPlanProperties checks the rules over 1–5 members, 1–12 tasks, 1–2
// replicas, with random previous owners (some of them gone, some tasks
// claimed twice) and random positions; and that a balanced previous
// assignment is kept whatever the positions.
func TestPlanProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 1))
	for m := 1; m <= 5; m++ {
		for n := 1; n <= 12; n++ {
			for replicas := 1; replicas <= 2; replicas++ {
				for round := range 20 {
					members := randomMembers(rng, m, n)
					parts := map[string]int32{"in": int32(n)}
					active, standby := plan(members, parts, replicas)
					checkPlan(t, members, parts, replicas, active, standby)
					again, againStandby := plan(members, parts, replicas)
					if !maps.EqualFunc(active, again, slices.Equal) || !maps.EqualFunc(standby, againStandby, slices.Equal) {
						t.Fatalf("m=%d n=%d round %d: plan not deterministic", m, n, round)
					}
					checkSticky(t, rng, m, n, replicas)
				}
			}
		}
	}
}

func randomMembers(rng *rand.Rand, m, n int) []member {
	members := make([]member, m)
	for i := range members {
		members[i] = member{id: fmt.Sprintf("m%d", i), topics: []string{"in"}, positions: map[state.Task]int64{},
			generation: int32(rng.IntN(3))}
	}
	for p := range int32(n) {
		if o := rng.IntN(m + 2); o < m { // else: its owner is gone
			members[o].owned = append(members[o].owned, task("in", p))
		}
		if rng.IntN(4) == 0 { // a stale second claim
			o := rng.IntN(m)
			members[o].owned = append(members[o].owned, task("in", p))
		}
		for i := range members {
			if rng.IntN(2) == 0 {
				members[i].positions[task("in", p)] = rng.Int64N(1000)
			}
		}
	}
	return members
}

// checkSticky: a previous assignment that is balanced (round robin over the
// same members) is kept, whatever the positions say.
func checkSticky(t *testing.T, rng *rand.Rand, m, n, replicas int) {
	t.Helper()
	members := randomMembers(rng, m, n)
	want := make(map[string][]state.Task)
	for i := range members {
		members[i].owned = nil
	}
	for p := range int32(n) {
		i := (int(p) + m - 1) % m // not the order a fresh plan would choose
		members[i].owned = append(members[i].owned, task("in", p))
		want[members[i].id] = append(want[members[i].id], task("in", p))
	}
	active, _ := plan(members, map[string]int32{"in": int32(n)}, replicas)
	if !maps.EqualFunc(active, want, slices.Equal) {
		t.Fatalf("m=%d n=%d: balanced owners not kept:\n got  %v\n want %v", m, n, active, want)
	}
}

// TestPlanDeadOwnerTasksFollowPositions: c owned in/4 and in/5 and is gone
// (three members before, two now); b's store holds in/4, a's holds in/5. A
// position-blind plan (fewest tasks, then member order) gives in/4 to a and
// in/5 to b: two full restores.
func TestPlanDeadOwnerTasksFollowPositions(t *testing.T) {
	members := []member{
		{id: "a", topics: []string{"in"}, owned: tasksOf("in", 0, 1),
			positions: map[state.Task]int64{task("in", 0): 9, task("in", 1): 9, task("in", 5): 500}},
		{id: "b", topics: []string{"in"}, owned: tasksOf("in", 2, 3),
			positions: map[state.Task]int64{task("in", 2): 9, task("in", 3): 9, task("in", 4): 700}},
	}
	parts := map[string]int32{"in": 6}
	active, standby := plan(members, parts, 1)
	checkPlan(t, members, parts, 1, active, standby)
	want := map[string][]state.Task{"a": tasksOf("in", 0, 1, 5), "b": tasksOf("in", 2, 3, 4)}
	if !maps.EqualFunc(active, want, slices.Equal) {
		t.Fatalf("active %v, want %v", active, want)
	}
}

// TestPlanStateBeatsNoState: a member without state for a task never gets it
// over one with state (position 0 included) while balance allows, though it
// comes first in member order and has fewer tasks.
func TestPlanStateBeatsNoState(t *testing.T) {
	members := []member{
		{id: "a", topics: []string{"in"}},
		{id: "b", topics: []string{"in"}, positions: map[state.Task]int64{task("in", 1): 0, task("in", 2): 3}},
		{id: "c", topics: []string{"in"}, owned: tasksOf("in", 0)},
	}
	parts := map[string]int32{"in": 4}
	active, standby := plan(members, parts, 2)
	owner := checkPlan(t, members, parts, 2, active, standby)
	// 4 tasks, 3 members: b has room for two, c keeps in/0.
	if owner[task("in", 1)] != "b" || owner[task("in", 2)] != "b" {
		t.Fatalf("b has state for in/1 and in/2 and room for both: %v", active)
	}
}

// TestPlanRegretOrder: a is the best candidate of both tasks and has room
// for one. in/0: a 100, b 99 – b takes it over cheaply; in/1: a 50, b none –
// b would read the whole changelog. The plan gives in/1 to a.
func TestPlanRegretOrder(t *testing.T) {
	members := []member{
		{id: "a", topics: []string{"in"}, positions: map[state.Task]int64{task("in", 0): 100, task("in", 1): 50}},
		{id: "b", topics: []string{"in"}, positions: map[state.Task]int64{task("in", 0): 99}},
	}
	active, _ := plan(members, map[string]int32{"in": 2}, 1)
	want := map[string][]state.Task{"a": tasksOf("in", 1), "b": tasksOf("in", 0)}
	if !maps.EqualFunc(active, want, slices.Equal) {
		t.Fatalf("active %v, want %v", active, want)
	}
}

// TestPlanStandbyPrefersState: the standby of in/0 is the member with state
// for it, though another has fewer standby tasks and comes first.
func TestPlanStandbyPrefersState(t *testing.T) {
	members := []member{
		{id: "a", topics: []string{"in"}, owned: tasksOf("in", 0)},
		{id: "b", topics: []string{"in"}, owned: tasksOf("in", 1)},
		{id: "c", topics: []string{"in"}, owned: tasksOf("in", 2),
			positions: map[state.Task]int64{task("in", 0): 5, task("in", 1): 1}},
	}
	parts := map[string]int32{"in": 3}
	active, standby := plan(members, parts, 1)
	checkPlan(t, members, parts, 1, active, standby)
	want := map[string][]state.Task{"a": tasksOf("in", 2), "c": tasksOf("in", 0, 1)}
	if !maps.EqualFunc(standby, want, slices.Equal) {
		t.Fatalf("standby %v, want %v", standby, want)
	}
}

// TestPlanMixedInterests: every task goes to a member reading its topic,
// each member gets its share of every topic it reads (a topic split evenly
// among its readers: a 3/2, b 3/2+3/2, c 3/2), and standbys are only members
// reading the topic.
func TestPlanMixedInterests(t *testing.T) {
	members := []member{
		{id: "a", topics: []string{"x"}},
		{id: "b", topics: []string{"x", "y"}},
		{id: "c", topics: []string{"y", "z"}}, // z has no partitions known
	}
	parts := map[string]int32{"x": 3, "y": 3}
	active, standby := plan(members, parts, 2)
	reads := map[string][]string{"a": {"x"}, "b": {"x", "y"}, "c": {"y"}}
	seen := make(map[state.Task]int)
	for id, ts := range active {
		for _, tk := range ts {
			if !slices.Contains(reads[id], tk.Topic) {
				t.Fatalf("%s active on %s, a topic it does not read", id, tk)
			}
			seen[tk]++
		}
	}
	for id, ts := range standby {
		for _, tk := range ts {
			if !slices.Contains(reads[id], tk.Topic) {
				t.Fatalf("%s standby on %s, a topic it does not read", id, tk)
			}
		}
	}
	if len(seen) != 6 {
		t.Fatalf("tasks assigned: %v", active)
	}
	for tk, c := range seen {
		if c != 1 {
			t.Fatalf("%s active %d times", tk, c)
		}
	}
	share := map[string][2]int{"a": {1, 2}, "b": {3, 3}, "c": {1, 2}}
	for id, r := range share {
		if c := len(active[id]); c < r[0] || c > r[1] {
			t.Fatalf("%s has %d tasks, want %d..%d: %v", id, c, r[0], r[1], active)
		}
	}
}

func TestBalancerPositionsRoundTrip(t *testing.T) {
	pos := map[state.Task]int64{task("b", 1): 0, task("a", 3): 1 << 40, task("a", 0): 7, task("b", 0): 1}
	enc := encodePositions(pos)
	if enc[0] != standbyDataVersion {
		t.Fatalf("version byte %d", enc[0])
	}
	for range 10 { // map order must not show in the bytes
		if again := encodePositions(maps.Clone(pos)); string(again) != string(enc) {
			t.Fatal("encodePositions not deterministic")
		}
	}
	got, err := decodePositions(enc)
	if err != nil || !maps.Equal(got, pos) {
		t.Fatalf("decoded %v, %v; want %v", got, err, pos)
	}
	if got, err := decodePositions(nil); err != nil || len(got) != 0 {
		t.Fatalf("empty: %v, %v", got, err)
	}
	if got, err := decodePositions(encodePositions(nil)); err != nil || len(got) != 0 {
		t.Fatalf("no positions: %v, %v", got, err)
	}
}

func TestBalancerStandbyTasksRoundTrip(t *testing.T) {
	tasks := []state.Task{task("b", 2), task("a", 1), task("a", 0)}
	got, err := decodeTasks(encodeTasks(tasks))
	want := []state.Task{task("a", 0), task("a", 1), task("b", 2)}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("decoded %v, %v; want %v", got, err, want)
	}
	if enc := encodeTasks(nil); enc != nil {
		t.Fatalf("no tasks encoded as %v", enc)
	}
	if got, err := decodeTasks(nil); err != nil || got != nil {
		t.Fatalf("empty: %v, %v", got, err)
	}
}

func TestBalancerDecodeErrors(t *testing.T) {
	enc := encodePositions(map[state.Task]int64{task("in", 0): 300, task("in", 1): 5})
	for n := 1; n < len(enc); n++ {
		if _, err := decodePositions(enc[:n]); !errors.Is(err, errStandbyData) {
			t.Fatalf("positions cut to %d bytes: %v", n, err)
		}
	}
	for n := 1; n < len(encodeTasks(tasksOf("in", 0, 1))); n++ {
		if _, err := decodeTasks(encodeTasks(tasksOf("in", 0, 1))[:n]); !errors.Is(err, errStandbyData) {
			t.Fatalf("tasks cut to %d bytes: %v", n, err)
		}
	}
	dup := []byte{standbyDataVersion, 1, 2, 'i', 'n', 2, 0, 0}
	for _, c := range []struct {
		name string
		b    []byte
		dec  func([]byte) error
		want string
	}{
		{"truncated offset", enc[:len(enc)-1], decPositions, `truncated at byte 10 reading offset of in/1`},
		{"truncated topic", enc[:4], decPositions, `length of topic 0 is 2, only 1 bytes left`},
		{"version", append([]byte{9}, enc[1:]...), decPositions, "version 9, want 1"},
		{"trailing", append(slices.Clone(enc), 0), decPositions, "1 bytes after the last topic"},
		{"huge count", []byte{standbyDataVersion, 0xff, 0xff, 0x03}, decTasks, "topic count is 65535, only 0 bytes left"},
		{"duplicate", dup, decTasks, "task in/0 twice"},
		{"partition range", []byte{standbyDataVersion, 1, 2, 'i', 'n', 1, 1}, decTasks, `partition -1 of topic "in" out of range`},
	} {
		err := c.dec(c.b)
		if !errors.Is(err, errStandbyData) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

func decPositions(b []byte) error { _, err := decodePositions(b); return err }
func decTasks(b []byte) error     { _, err := decodeTasks(b); return err }

// joinMember is what the coordinator hands the leader for a member that sent
// b's join metadata.
func joinMember(id string, b kgo.GroupBalancer, owned map[string][]int32, gen int32) kmsg.JoinGroupResponseMember {
	m := kmsg.NewJoinGroupResponseMember()
	m.MemberID = id
	m.ProtocolMetadata = b.JoinGroupMetadata([]string{"in"}, owned, gen)
	return m
}

// TestBalancerBalanceAndSync runs the kgo side without Kafka: join metadata
// → MemberBalancer → Balance → each member's ParseSyncAssignment. A task
// that moves (b's in/2 to a, whose store holds it) is withheld from a this
// round (cooperative): b revokes it and rejoins first.
func TestBalancerBalanceAndSync(t *testing.T) {
	got := make(map[string][]state.Task)
	bal := func(id string, pos map[state.Task]int64) kgo.GroupBalancer {
		return newStandbyBalancer(1, func() map[state.Task]int64 { return pos },
			func(s []state.Task) { got[id] = s }, nil)
	}
	a := bal("a", map[state.Task]int64{task("in", 2): 40})
	b := bal("b", nil)
	c := bal("c", nil)
	if a.ProtocolName() != "projector-standby-v1" || !a.IsCooperative() {
		t.Fatalf("protocol %q cooperative %v", a.ProtocolName(), a.IsCooperative())
	}
	members := []kmsg.JoinGroupResponseMember{
		joinMember("a", a, nil, 3),
		joinMember("b", b, map[string][]int32{"in": {2, 0, 1}}, 3),
		joinMember("c", c, nil, 3),
	}
	mb, topics, err := a.MemberBalancer(members)
	if err != nil || !maps.Equal(topics, map[string]struct{}{"in": {}}) {
		t.Fatalf("MemberBalancer: %v, %v", topics, err)
	}
	into, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(map[string]int32{"in": 3})
	if err != nil {
		t.Fatal(err)
	}
	sync := into.IntoSyncAssignment()
	actives := make(map[string]map[string][]int32)
	byID := map[string]kgo.GroupBalancer{"a": a, "b": b, "c": c}
	for i, s := range sync {
		if want := []string{"a", "b", "c"}[i]; s.MemberID != want {
			t.Fatalf("assignment %d for %s, want %s (member order)", i, s.MemberID, want)
		}
		if actives[s.MemberID], err = byID[s.MemberID].ParseSyncAssignment(s.MemberAssignment); err != nil {
			t.Fatal(err)
		}
	}
	// b keeps in/0 (floor); in/1 and in/2 are b's beyond its share: in/2 is
	// planned for a (its store), in/1 for c, both withheld until b revokes.
	wantActive := map[string]map[string][]int32{"a": {}, "b": {"in": {0}}, "c": {}}
	for id, want := range wantActive {
		if !maps.EqualFunc(actives[id], want, slices.Equal) {
			t.Fatalf("%s active %v, want %v (all: %v)", id, actives[id], want, actives)
		}
	}
	// Standbys follow the plan (a active on in/2, c on in/1); nobody has
	// state but a's in/2, so each goes to the fewest standby tasks.
	wantStandby := map[string][]state.Task{"a": tasksOf("in", 0), "b": tasksOf("in", 1), "c": tasksOf("in", 2)}
	if !maps.EqualFunc(got, wantStandby, slices.Equal) {
		t.Fatalf("standby %v, want %v", got, wantStandby)
	}
}

// TestBalancerUndecodableMember: a member whose positions do not decode is
// balanced as one without state, and warn names it; one whose metadata does
// not decode fails the balance, named; bad standby tasks in a sync
// assignment are an error.
func TestBalancerUndecodableMember(t *testing.T) {
	var warned []error
	b := newStandbyBalancer(1, nil, nil, func(err error) { warned = append(warned, err) })
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = []string{"in"}
	meta.UserData = []byte{standbyDataVersion, 1}
	bad := kmsg.NewJoinGroupResponseMember()
	bad.MemberID, bad.InstanceID = "m-2", kmsg.StringPtr("i-2")
	bad.ProtocolMetadata = meta.AppendTo(nil)
	mb, topics, err := b.MemberBalancer([]kmsg.JoinGroupResponseMember{joinMember("m-1", b, nil, 1), bad})
	if err != nil || len(topics) != 1 {
		t.Fatalf("a member with unreadable positions failed the balance: %v (topics %v)", err, topics)
	}
	if len(warned) != 1 || !errors.Is(warned[0], errStandbyData) || !strings.Contains(warned[0].Error(), `member "m-2" (instance "i-2")`) {
		t.Fatalf("warnings %v, want one naming m-2", warned)
	}
	plan, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(map[string]int32{"in": 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := plan.IntoSyncAssignment(); len(got) != 2 {
		t.Fatalf("balanced %d members, want 2", len(got))
	}
	garbage := bad
	garbage.ProtocolMetadata = []byte{0, 3, 0xff}
	_, _, err = b.MemberBalancer([]kmsg.JoinGroupResponseMember{joinMember("m-1", b, nil, 1), garbage})
	if err == nil || !strings.Contains(err.Error(), `member "m-2" (instance "i-2")`) {
		t.Fatalf("garbage metadata: %v", err)
	}
	syncBad := kmsg.NewConsumerMemberAssignment()
	syncBad.UserData = []byte{standbyDataVersion, 1}
	if _, err := b.ParseSyncAssignment(syncBad.AppendTo(nil)); !errors.Is(err, errStandbyData) {
		t.Fatalf("bad standby tasks in the sync assignment: %v", err)
	}
}

// groupMember is a plain kgo group consumer with the standby balancer,
// recording its active partitions (from the callbacks) and its last standby
// list (from assigned).
type groupMember struct {
	name    string
	cl      *kgo.Client
	mu      sync.Mutex
	active  map[state.Task]bool
	standby []state.Task
	synced  bool
}

func startGroupMember(t *testing.T, addrs []string, name string, pos map[state.Task]int64) *groupMember {
	t.Helper()
	gm := &groupMember{name: name, active: make(map[state.Task]bool)}
	change := func(add bool) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			gm.mu.Lock()
			defer gm.mu.Unlock()
			for topic, ps := range m {
				for _, p := range ps {
					if add {
						gm.active[task(topic, p)] = true
					} else {
						delete(gm.active, task(topic, p))
					}
				}
			}
		}
	}
	assigned := func(s []state.Task) {
		gm.mu.Lock()
		defer gm.mu.Unlock()
		gm.standby, gm.synced = s, true
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ClientID(name), // member ids start with it: member order
		kgo.ConsumerGroup("g"), kgo.ConsumeTopics("in"),
		kgo.Balancers(newStandbyBalancer(1, func() map[state.Task]int64 { return pos }, assigned, nil), kgo.CooperativeStickyBalancer()),
		kgo.HeartbeatInterval(100*time.Millisecond), kgo.SessionTimeout(6*time.Second),
		kgo.OnPartitionsAssigned(change(true)), kgo.OnPartitionsRevoked(change(false)), kgo.OnPartitionsLost(change(false)))
	if err != nil {
		t.Fatal(err)
	}
	gm.cl = cl
	t.Cleanup(cl.Close) // Close is idempotent
	return gm
}

// snapshot is the member's active tasks (sorted) and standby tasks.
func (gm *groupMember) snapshot() (active, standby []state.Task, synced bool) {
	gm.mu.Lock()
	defer gm.mu.Unlock()
	active = slices.SortedFunc(maps.Keys(gm.active), compareTasks)
	return active, slices.Clone(gm.standby), gm.synced
}

// settled reports whether the members' active tasks cover in/0..in/3 once
// each and their standby lists give each task min(1, members−1) standby
// members other than its active one: a state the group only reaches once
// both cooperative rounds are done and every member has synced.
func settled(members ...*groupMember) bool {
	activeOf := make(map[state.Task]string)
	standbys := make(map[state.Task][]string)
	for _, gm := range members {
		active, standby, synced := gm.snapshot()
		if !synced {
			return false
		}
		for _, tk := range active {
			if activeOf[tk] != "" {
				return false
			}
			activeOf[tk] = gm.name
		}
		for _, tk := range standby {
			standbys[tk] = append(standbys[tk], gm.name)
		}
	}
	for p := range int32(4) {
		tk := task("in", p)
		s := standbys[tk]
		if activeOf[tk] == "" || len(s) != min(1, len(members)-1) || slices.Contains(s, activeOf[tk]) {
			return false
		}
	}
	return true
}

func describe(members ...*groupMember) string {
	var b strings.Builder
	for _, gm := range members {
		active, standby, synced := gm.snapshot()
		fmt.Fprintf(&b, "%s active %v standby %v synced %v; ", gm.name, active, standby, synced)
	}
	return b.String()
}

// TestBalancerKfakeGroup runs three kgo consumers with the standby balancer
// on kfake: a alone owns in/0..3; b and c join (a keeps in/0 and in/1, its
// share, and revokes the rest cooperatively); then a leaves and its tasks go
// to the member whose store holds them (in/0: c, in/1: b), where member
// order alone (b before c, both holding one task) would give in/0 to b.
// Standby lists arrive through assigned on every sync.
func TestBalancerKfakeGroup(t *testing.T) {
	c, err := broker.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "in"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	wait := func(what string, members ...*groupMember) {
		t.Helper()
		if err := testkit.WaitFor(ctx, 20*time.Second, func() bool { return settled(members...) }); err != nil {
			t.Fatalf("%s: %v: %s", what, err, describe(members...))
		}
	}

	a := startGroupMember(t, c.ListenAddrs(), "a", nil)
	wait("a alone", a)
	if active, standby, _ := a.snapshot(); len(active) != 4 || standby != nil {
		t.Fatalf("a alone: active %v standby %v", active, standby)
	}

	b := startGroupMember(t, c.ListenAddrs(), "b", map[state.Task]int64{task("in", 1): 40})
	cc := startGroupMember(t, c.ListenAddrs(), "c", map[state.Task]int64{task("in", 0): 40})
	wait("a, b and c", a, b, cc)
	if active, _, _ := a.snapshot(); !slices.Equal(active, tasksOf("in", 0, 1)) {
		t.Fatalf("a kept %v, want in/0 and in/1: %s", active, describe(a, b, cc))
	}
	// The standby of in/0 is c and of in/1 is b: their stores hold them.
	if _, s, _ := cc.snapshot(); !slices.Contains(s, task("in", 0)) {
		t.Fatalf("c not standby of in/0: %s", describe(a, b, cc))
	}
	if _, s, _ := b.snapshot(); !slices.Contains(s, task("in", 1)) {
		t.Fatalf("b not standby of in/1: %s", describe(a, b, cc))
	}
	groups, err := kadm.NewClient(a.cl).DescribeGroups(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if got := groups["g"].Protocol; got != standbyProtocol {
		t.Fatalf("group protocol %q, want %q", got, standbyProtocol)
	}

	a.cl.Close() // leaves the group
	wait("b and c after a left", b, cc)
	bActive, bStandby, _ := b.snapshot()
	cActive, cStandby, _ := cc.snapshot()
	if len(bActive) != 2 || len(cActive) != 2 || !slices.Contains(bActive, task("in", 1)) || !slices.Contains(cActive, task("in", 0)) {
		t.Fatalf("want in/1 on b and in/0 on c, two each: %s", describe(b, cc))
	}
	if !slices.Equal(bStandby, cActive) || !slices.Equal(cStandby, bActive) {
		t.Fatalf("each must be the other's standby: %s", describe(b, cc))
	}
}
