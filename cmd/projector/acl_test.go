package main

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/core/acl"
	"github.com/projector-dev/projector/processor"
)

// The Kafka ACLs each role needs, as docs/operations.md#kafka-acls lists
// them. TestKafkaACLs grants exactly these (and no more) to a principal per
// role on a broker that enforces ACLs, runs the role until it does its real
// work, then removes each ACL in turn and requires the role to fail naming
// it; TestKafkaACLsDocumented requires the docs to list exactly these.

// aclNames are the names a role's configuration gives the resources it
// uses. In the docs they are placeholders (<name>, <input>, …).
type aclNames struct {
	name, instance, input string
	projection            string // the projection topic
	effects, dlq          string // kafka.effectsTopic, kafka.deadLetterTopic
	receipts, claims      string // ingress.receiptsTopic, ingress.claimsTopic
	target                string // rebuild --topic
	diffA, diffB          string // diff --topic A --topic B
}

func (n aclNames) changelog() string       { return n.name + "." + n.input + ".changelog" }
func (n aclNames) claimsChangelog() string { return n.name + "." + n.claims + ".changelog" }
func (n aclNames) executorChangelog() string {
	return n.name + "-executor." + n.effects + ".changelog"
}
func (n aclNames) rebuildGroup() string { return n.name + "-rebuild-" + n.target }

// grant is one ACL of a role's list.
type grant struct {
	res    kmsg.ACLResourceType
	name   string
	prefix bool // a PREFIXED resource pattern (else LITERAL)
	op     kmsg.ACLOperation
	// need is the permission as the role uses it, which its error names
	// when the grant is missing (a prefixed transactional id's need names
	// the instance's own id).
	need acl.Need
}

func (g grant) String() string {
	pattern := "literal"
	if g.prefix {
		pattern = "prefixed"
	}
	return fmt.Sprintf("%s %s %q %s", acl.OpName(g.op), acl.ResourceName(g.res), g.name, pattern)
}

const (
	opRead     = kmsg.ACLOperationRead
	opWrite    = kmsg.ACLOperationWrite
	opCreate   = kmsg.ACLOperationCreate
	opDescribe = kmsg.ACLOperationDescribe
	opDescCfg  = kmsg.ACLOperationDescribeConfigs
)

func topicGrants(name string, ops ...kmsg.ACLOperation) []grant {
	var gs []grant
	for _, op := range ops {
		gs = append(gs, grant{res: kmsg.ACLResourceTypeTopic, name: name, op: op, need: acl.Topic(name, op, "")})
	}
	return gs
}

func groupGrant(name string, op kmsg.ACLOperation) grant {
	return grant{res: kmsg.ACLResourceTypeGroup, name: name, op: op, need: acl.Group(name, op, "")}
}

// txnGrant is Write on the transactional ids starting with prefix; the
// instance's id is prefix + instance.
func txnGrant(prefix, instance string) grant {
	return grant{res: kmsg.ACLResourceTypeTransactionalId, name: prefix, prefix: true, op: opWrite,
		need: acl.TransactionalID(prefix+instance, "")}
}

// aclRoles are the roles in the order the docs list them, each with its
// list of grants.
var aclRoles = []struct {
	role   string
	grants func(n aclNames) []grant
}{
	{"processor", func(n aclNames) []grant {
		gs := []grant{groupGrant(n.name, opRead), txnGrant(n.name+"-", n.instance)}
		gs = append(gs, topicGrants(n.input, opRead)...)
		gs = append(gs, topicGrants(n.changelog(), opCreate, opRead, opWrite, opDescCfg)...)
		gs = append(gs, topicGrants(n.projection, opCreate, opWrite)...)
		gs = append(gs, topicGrants(n.dlq, opCreate, opWrite)...)
		gs = append(gs, topicGrants(n.effects, opCreate, opWrite)...)
		// With an ingress section: its receipts, its claims (an internal
		// input with a changelog) and the events of won claims forwarded.
		gs = append(gs, topicGrants(n.receipts, opCreate, opWrite)...)
		gs = append(gs, topicGrants(n.claims, opCreate, opRead)...)
		gs = append(gs, topicGrants(n.claimsChangelog(), opCreate, opRead, opWrite, opDescCfg)...)
		return append(gs, topicGrants(n.input, opWrite)...)
	}},
	{"executor", func(n aclNames) []grant {
		gs := []grant{groupGrant(n.name+"-executor", opRead), txnGrant(n.name+"-executor-", n.instance)}
		gs = append(gs, topicGrants(n.effects, opCreate, opRead, opWrite)...)
		gs = append(gs, topicGrants(n.executorChangelog(), opCreate, opRead, opWrite, opDescCfg)...)
		return append(gs, topicGrants(n.dlq, opCreate, opWrite)...)
	}},
	{"ingress", func(n aclNames) []grant {
		gs := append(topicGrants(n.claims, opCreate, opWrite), topicGrants(n.receipts, opCreate, opRead)...)
		return append(gs, topicGrants(n.input, opDescribe)...)
	}},
	{"rebuild", func(n aclNames) []grant {
		gs := []grant{groupGrant(n.rebuildGroup(), opRead), txnGrant(n.rebuildGroup()+"-", n.instance)}
		gs = append(gs, topicGrants(n.input, opRead)...)
		gs = append(gs, topicGrants(n.target, opCreate, opWrite)...)
		gs = append(gs, topicGrants(n.rebuildGroup()+"."+n.input+".changelog", opCreate, opRead, opWrite, opDescCfg)...)
		return append(gs, topicGrants(n.target+".dlq", opCreate, opWrite)...)
	}},
	{"diff", func(n aclNames) []grant { return append(topicGrants(n.diffA, opRead), topicGrants(n.diffB, opRead)...) }},
	{"effects list", func(n aclNames) []grant { return topicGrants(n.executorChangelog(), opRead) }},
	{"effects show", func(n aclNames) []grant { return topicGrants(n.executorChangelog(), opRead) }},
	{"effects resolve", func(n aclNames) []grant {
		return append(topicGrants(n.executorChangelog(), opRead), topicGrants(n.effects, opWrite)...)
	}},
	{"gaps list", func(n aclNames) []grant { return topicGrants(n.changelog(), opRead) }},
	{"gaps skip", func(n aclNames) []grant {
		gs := append(topicGrants(n.changelog(), opRead), topicGrants(n.input, opWrite)...)
		return append(gs, groupGrant(n.name, opDescribe))
	}},
	{"inspect", func(n aclNames) []grant { return topicGrants(n.changelog(), opRead) }},
}

func roleGrants(role string, n aclNames) []grant {
	for _, r := range aclRoles {
		if r.role == role {
			return r.grants(n)
		}
	}
	panic("no role " + role)
}

// docNames are the placeholders the docs' tables use.
var docNames = aclNames{
	name: "<name>", instance: "<instanceId>", input: "<input>", projection: "<projection topic>",
	effects: "<effectsTopic>", dlq: "<deadLetterTopic>", receipts: "<receiptsTopic>", claims: "<claimsTopic>",
	target: "<topic>", diffA: "<A>", diffB: "<B>",
}

// docRows renders a role's grants as the docs' table rows: resource, name,
// pattern and operations, one row per resource.
func docRows(gs []grant) []string {
	var keys []string
	ops := map[string][]string{}
	for _, g := range gs {
		pattern := "literal"
		if g.prefix {
			pattern = "prefixed"
		}
		res := map[kmsg.ACLResourceType]string{kmsg.ACLResourceTypeTopic: "Topic", kmsg.ACLResourceTypeGroup: "Group",
			kmsg.ACLResourceTypeTransactionalId: "TransactionalId"}[g.res]
		k := fmt.Sprintf("| %s | `%s` | %s |", res, g.name, pattern)
		if _, ok := ops[k]; !ok {
			keys = append(keys, k)
		}
		ops[k] = append(ops[k], acl.OpName(g.op))
	}
	rows := make([]string, 0, len(keys))
	for _, k := range keys {
		rows = append(rows, fmt.Sprintf("%s %s |", k, strings.Join(ops[k], ", ")))
	}
	return rows
}

var docRowRE = regexp.MustCompile("^(\\| [A-Za-z]+ \\| `[^`]+` \\| (literal|prefixed) \\| [A-Za-z, ]+ \\|)")

// TestKafkaACLsDocumented: docs/operations.md lists, per role, exactly the
// ACLs TestKafkaACLs grants: the rows between <!-- acl:ROLE --> and the end
// of the table (the first four columns; the fifth says why).
func TestKafkaACLsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(doc), "\n")
	for _, r := range aclRoles {
		marker := "<!-- acl:" + r.role + " -->"
		i := slices.Index(lines, marker)
		if i < 0 {
			t.Errorf("docs/operations.md has no %s", marker)
			continue
		}
		var got []string
		for _, l := range lines[i+1:] {
			if !strings.HasPrefix(l, "|") {
				break
			}
			if m := docRowRE.FindStringSubmatch(l); m != nil {
				got = append(got, m[1])
			}
		}
		if want := docRows(r.grants(docNames)); !slices.Equal(got, want) {
			t.Errorf("%s: docs/operations.md lists\n  %s\nwant\n  %s", r.role, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
	}
}

// TestKafkaACLs runs every role on a broker that requires SASL and enforces
// ACLs, each as its own principal granted exactly its documented list
// (aclRoles), until it does its real work: the processor applies events,
// holds gaps and dead-letters a poison record; the executor calls a webhook
// and parks two unknown outcomes; the ingress answers 201; each operator
// command does what it is for. Then, for every ACL of every list, a new
// principal is granted the list without it, and the role must fail at
// start or first use with an error that names the missing permission (the
// resource, its name and the operation), never run on or hang.
func TestKafkaACLs(t *testing.T) {
	e := startACLEnv(t)
	t.Run("granted", func(t *testing.T) { aclGranted(t, e) })
	if t.Failed() {
		return // the removal table compares against a role that works
	}
	t.Run("removed", func(t *testing.T) {
		for _, r := range aclRoles {
			for i, doc := range r.grants(docNames) {
				t.Run(r.role+"/"+doc.String(), func(t *testing.T) {
					t.Parallel()
					n := aclRemovalNames(r.role, i)
					gs := r.grants(n)
					g := gs[i]
					gs = slices.Delete(gs, i, i+1)
					err := aclRunExpectingFailure(t, e, r.role, n, e.principal(t, r.role, gs))
					want := g.need.String()
					if err == nil || !strings.Contains(err.Error(), want) {
						t.Fatalf("without %s: error %v\nwant one naming %s", g, err, want)
					}
					t.Logf("without %s: %v", g, lastLine(err.Error()))
				})
			}
		}
	})
}

// aclRemovalNames are the names of a removal run: the roles that create
// topics get names of their own (so each run creates its topics, and Create
// is needed), the readers work against the live processor and executor.
func aclRemovalNames(role string, i int) aclNames {
	n := liveNames()
	switch role {
	case "processor":
		n = namesFor(fmt.Sprintf("p%d", i))
	case "executor":
		n = namesFor(fmt.Sprintf("x%d", i))
	case "ingress":
		n.receipts = fmt.Sprintf("i%d.receipts", i)
		n.claims = fmt.Sprintf("i%d.claims", i)
	case "rebuild":
		n.target = fmt.Sprintf("acl.r%d", i)
	}
	return n
}

// TestKafkaACLsUnreportedOperations: against a broker that does not report
// authorized operations (Kafka before 2.3: Metadata v7, DescribeGroups v2)
// the check at start cannot tell Describe from Read; a processor granted
// Describe instead of Read on its group is then refused when it joins, and
// that refusal names the permission too.
func TestKafkaACLsUnreportedOperations(t *testing.T) {
	old := kversion.Stable()
	old.SetMaxKeyVersion(int16(kmsg.Metadata), 7)
	old.SetMaxKeyVersion(int16(kmsg.DescribeGroups), 2)
	e := startACLEnv(t, kfake.MaxVersions(old))
	n := namesFor("pold")
	gs := roleGrants("processor", n)
	read := gs[0]
	if read.res != kmsg.ACLResourceTypeGroup || read.op != opRead {
		t.Fatalf("the processor's first grant is %s, want Read on its group", read)
	}
	gs[0] = groupGrant(n.name, opDescribe)
	p := e.startApp(t, e.config(t, n, e.principal(t, "processor", gs)), wiring.RoleProcessor)
	err := p.failure(t, func() bool { return p.a.Processor.Stats().Outcome(processor.OutcomeApplied) > 0 })
	if err == nil || !strings.Contains(err.Error(), read.need.String()) || strings.Contains(err.Error(), "cannot start") {
		t.Fatalf("error %v\nwant the join's refusal naming %s", err, read.need)
	}
	t.Logf("Describe instead of Read on the group: %v", err)
}
