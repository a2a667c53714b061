package eos

import (
	"cmp"
	"maps"
	"math/big"
	"slices"

	"github.com/projector-dev/projector/internal/core/state"
)

// member is a group member as the standby balancer plans for it.
type member struct {
	id         string
	topics     []string     // interests
	owned      []state.Task // OwnedPartitions of its join
	generation int32        // the generation its owned tasks are from
	positions  map[state.Task]int64
}

// plan assigns every task of the topics members are interested in to one
// active member and up to replicas standby members, by the rules of the file
// comment of balancer.go. partitions: the partition count per topic (a
// topic not in it has no tasks). It is pure: the same input gives the same
// plan. Tasks per member are sorted.
func plan(members []member, partitions map[string]int32, replicas int) (active, standby map[string][]state.Task) {
	p := newPlanner(members, partitions)
	p.keepOwned()
	p.placeByPosition()
	active = make(map[string][]state.Task)
	for _, t := range p.tasks {
		id := members[p.owner[t]].id
		active[id] = append(active[id], t)
	}
	return active, p.standbys(replicas)
}

type planner struct {
	members    []member
	tasks      []state.Task     // sorted
	interested map[string][]int // topic → indexes of the members interested, in member order
	owner      map[state.Task]int
	count      []int // active tasks per member so far
	lo, hi     []int // a member's floor and ceiling (quotas)
	extra      int   // how many more members may still go above their floor
}

func newPlanner(members []member, partitions map[string]int32) *planner {
	p := &planner{members: members, interested: make(map[string][]int), owner: make(map[state.Task]int),
		count: make([]int, len(members))}
	for i, m := range members {
		for _, topic := range m.topics {
			if l := p.interested[topic]; partitions[topic] > 0 && (len(l) == 0 || l[len(l)-1] != i) {
				p.interested[topic] = append(l, i)
			}
		}
	}
	for _, topic := range slices.Sorted(maps.Keys(p.interested)) {
		for part := range partitions[topic] {
			p.tasks = append(p.tasks, state.Task{Topic: topic, Partition: part})
		}
	}
	p.quotas(partitions)
	return p
}

// quotas sets each member's floor and ceiling of active tasks. A member's
// fair share is, over the topics it reads, the topic's partitions over the
// members reading it; with equal interests that is n/m for everyone. Every
// member may have its floor; extra (n − Σ floors) members may have one more,
// up to their ceiling. With equal interests that is the balance rule exactly
// (floor(n/m), and n mod m members at ceil(n/m)), and every task finds a
// member with room. With mixed interests the shares are a sensible target,
// not a guarantee: a task whose readers are all full still goes to the
// reader that ranks first for it (placeByPosition), so that every task has an
// active member (rule 1 before rule 2).
func (p *planner) quotas(partitions map[string]int32) {
	p.lo, p.hi = make([]int, len(p.members)), make([]int, len(p.members))
	p.extra = len(p.tasks)
	for i, m := range p.members {
		share := new(big.Rat)
		seen := make(map[string]bool)
		for _, topic := range m.topics {
			if k := len(p.interested[topic]); k > 0 && !seen[topic] {
				seen[topic] = true
				share.Add(share, big.NewRat(int64(partitions[topic]), int64(k)))
			}
		}
		q, r := new(big.Int).QuoRem(share.Num(), share.Denom(), new(big.Int))
		p.lo[i], p.hi[i] = int(q.Int64()), int(q.Int64())
		if r.Sign() != 0 {
			p.hi[i]++
		}
		p.extra -= p.lo[i]
	}
}

// hasRoom says whether member i may take one more active task.
func (p *planner) hasRoom(i int) bool {
	return p.count[i] < p.lo[i] || (p.count[i] < p.hi[i] && p.extra > 0)
}

func (p *planner) assign(t state.Task, i int) {
	if p.count[i] >= p.lo[i] {
		p.extra--
	}
	p.count[i]++
	p.owner[t] = i
}

// keepOwned leaves each task with its current owner while the owner is
// within its quota: first up to every owner's floor, then the extra places,
// so that one owner listed early cannot take the extra places from the
// others. Two members claiming a task (one missed a rebalance): the claim of
// the higher generation counts, as in AdjustCooperative (KIP-792).
func (p *planner) keepOwned() {
	claim := make(map[state.Task]int)
	isTask := make(map[state.Task]bool, len(p.tasks))
	for _, t := range p.tasks {
		isTask[t] = true
	}
	for i, m := range p.members {
		for _, t := range m.owned {
			if !isTask[t] || !slices.Contains(p.interested[t.Topic], i) {
				continue
			}
			if c, ok := claim[t]; !ok || m.generation > p.members[c].generation {
				claim[t] = i
			}
		}
	}
	for _, floorOnly := range []bool{true, false} {
		for _, t := range p.tasks {
			i, ok := claim[t]
			if _, done := p.owner[t]; ok && !done && (p.count[i] < p.lo[i] || !floorOnly && p.hasRoom(i)) {
				p.assign(t, i)
			}
		}
	}
}

// placeByPosition assigns the tasks no owner kept, each to the reader with
// room that ranks first (highest position; state beats none; fewest tasks;
// member order).
//
// The order of the tasks decides who wins when a member is the best
// candidate of more tasks than it has room for. Tasks go in decreasing
// regret: the best position minus the second best among the task's readers
// (a reader without state counts as −1), that is, about how many more
// changelog records the takeover reads if the best candidate is full. A task
// only one member has state for, held far along, goes before tasks two
// members hold equally well (either can take those cheaply); tasks no member
// has state for go last, by fewest tasks, which spreads them evenly. Ties:
// the higher best position, then task order. Tasks only one member reads go
// first of all: they have no other place.
func (p *planner) placeByPosition() {
	type pending struct {
		t            state.Task
		forced, none bool
		regret, best int64
	}
	var todo []pending
	for _, t := range p.tasks {
		if _, done := p.owner[t]; done {
			continue
		}
		readers := p.interested[t.Topic]
		e := pending{t: t, forced: len(readers) == 1, none: true, best: -1}
		second := int64(-1)
		for _, i := range readers {
			pos, ok := p.members[i].positions[t]
			switch {
			case !ok:
			case e.none || pos > e.best:
				e.best, second, e.none = pos, e.best, false
			case pos > second:
				second = pos
			}
		}
		e.regret = e.best - second
		todo = append(todo, e)
	}
	slices.SortStableFunc(todo, func(a, b pending) int {
		if a.forced != b.forced {
			return boolFirst(a.forced)
		}
		if a.none != b.none {
			return boolFirst(b.none)
		}
		return cmp.Or(cmp.Compare(b.regret, a.regret), cmp.Compare(b.best, a.best))
	})
	for _, e := range todo {
		readers := p.interested[e.t.Topic]
		withRoom := slices.DeleteFunc(slices.Clone(readers), func(i int) bool { return !p.hasRoom(i) })
		if len(withRoom) == 0 { // mixed interests only (quotas)
			withRoom = readers
		}
		p.assign(e.t, slices.MinFunc(withRoom, p.rankActive(e.t)))
	}
}

// rankActive orders candidates for t's active place, best first.
func (p *planner) rankActive(t state.Task) func(a, b int) int {
	return func(a, b int) int {
		return cmp.Or(p.comparePositions(t, a, b), cmp.Compare(p.count[a], p.count[b]), cmp.Compare(a, b))
	}
}

// comparePositions orders members a and b by their position for t, highest
// first, a member with state before one without.
func (p *planner) comparePositions(t state.Task, a, b int) int {
	pa, oka := p.members[a].positions[t]
	pb, okb := p.members[b].positions[t]
	if oka != okb {
		return boolFirst(oka)
	}
	return cmp.Compare(pb, pa)
}

// standbys gives every task min(replicas, readers − 1) standby members,
// never its active member: highest position first (state before none), then
// fewest standby tasks so far, then member order.
func (p *planner) standbys(replicas int) map[string][]state.Task {
	out := make(map[string][]state.Task)
	load := make([]int, len(p.members))
	for _, t := range p.tasks {
		candidates := slices.DeleteFunc(slices.Clone(p.interested[t.Topic]), func(i int) bool { return i == p.owner[t] })
		slices.SortFunc(candidates, func(a, b int) int {
			return cmp.Or(p.comparePositions(t, a, b), cmp.Compare(load[a], load[b]), cmp.Compare(a, b))
		})
		for _, i := range candidates[:min(replicas, len(candidates))] {
			load[i]++
			out[p.members[i].id] = append(out[p.members[i].id], t)
		}
	}
	return out
}

// boolFirst orders true before false, given that the two differ.
func boolFirst(aTrue bool) int {
	if aTrue {
		return -1
	}
	return 1
}
