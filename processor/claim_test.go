package processor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/core/receipt"
	"github.com/projector-dev/projector/internal/core/state"
)

// claimRecord is a claims-topic record of request id under (tenant, key)
// with one event per aggregate given (a batch when more than one).
func claimRecord(tenant, key, id string, aggregates ...string) *kgo.Record {
	c := &receipt.Claim{TenantID: tenant, Key: key, Request: id, Batch: len(aggregates) > 1}
	for i, a := range aggregates {
		c.Events = append(c.Events, []byte(fmt.Sprintf(`{"eventId":%q,"tenantId":%q,"eventType":"CaseOpened","aggregateId":%q,"aggregateVersion":1}`,
			receipt.EventID(tenant, key, i), tenant, a)))
	}
	return &kgo.Record{Topic: "claims", Key: []byte(receipt.ClaimKey(tenant, key)), Value: receipt.AppendClaim(nil, c)}
}

// TestClaimFirstWins (docs/decisions/012-ingress-claims.md): in a claims
// task the first claim of a (tenant, key) forwards its events to the
// ingress topic, by aggregate with the projector-ingress header, and
// writes the claim receipt naming its request; every later claim of the
// key – the same payload or another, in the same transaction or a later
// one – forwards and writes nothing. Malformed claims are dead-lettered.
func TestClaimFirstWins(t *testing.T) {
	st, err := state.Open(t.TempDir(), storeOptions(0))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p, _, _ := directTaskWith(t, st, func(c *Config) {
		c.ReceiptsTopic, c.ClaimsTopic, c.IngressTopic = "receipts", "claims", "case-events"
	})
	id := state.Task{Topic: "claims", Partition: 0}
	task := &eos.Task{ID: id, Prefix: id.Prefix()}
	ts := (*pipeline)(p).NewTask(task)
	if !ts.claims {
		t.Fatal("a partition of the claims topic is not a claims task")
	}
	if err := ts.Restored(); err != nil {
		t.Fatal(err)
	}
	var out []*kgo.Record
	run := func(recs ...*kgo.Record) []*kgo.Record {
		t.Helper()
		out = nil
		b := eos.NewTaskBatch(st, task, time.Now(), func(r *kgo.Record) {
			if r.Topic != ChangelogTopic(p.cfg.Group, "claims") {
				out = append(out, r)
			}
		})
		for _, r := range recs {
			if err := ts.Process(b, r); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(ts, ChangelogTopic(p.cfg.Group, "claims")); err != nil {
			t.Fatal(err)
		}
		return out
	}
	describe := func(rs []*kgo.Record) string {
		var s []string
		for _, r := range rs {
			h := ""
			for _, x := range r.Headers {
				h += " " + x.Key + "=" + string(x.Value)
			}
			s = append(s, fmt.Sprintf("%s %q%s", r.Topic, r.Key, h))
		}
		return strings.Join(s, "\n")
	}

	got := run(claimRecord("t", "k", "r1", "A-1"), claimRecord("t", "k", "r2", "A-1"), claimRecord("t", "k", "r3", "A-2"))
	if len(got) != 2 || got[0].Topic != "case-events" || string(got[0].Key) != "A-1" || got[1].Topic != "receipts" {
		t.Fatalf("three claims of one key, want one event forwarded and one claim receipt:\n%s", describe(got))
	}
	o, err := receipt.ParseOrigin(got[0].Headers[0].Value)
	if err != nil || got[0].Headers[0].Key != receipt.Header || o != (receipt.Origin{TenantID: "t", Key: "k", Index: 0, Count: 1}) {
		t.Fatalf("forwarded event's header %v: %+v %v", got[0].Headers, o, err)
	}
	won, err := receipt.DecodeClaimReceipt(got[1].Value)
	if err != nil || won.Request != "r1" || won.Count != 1 || string(got[1].Key) != receipt.ClaimKey("t", "k") ||
		len(got[1].Headers) != 1 || got[1].Headers[0].Key != receipt.ClaimHeader {
		t.Fatalf("claim receipt %s (%v): want request r1", got[1].Value, err)
	}
	// Decided for good: a later transaction forwards nothing for the key,
	// but decides another key (a batch: its events in order).
	got = run(claimRecord("t", "k", "r4", "A-1"), claimRecord("t", "k", "r5", "A-3"), claimRecord("t", "b", "r6", "B-1", "B-2"))
	if len(got) != 3 || string(got[0].Key) != "B-1" || string(got[1].Key) != "B-2" || got[2].Topic != "receipts" {
		t.Fatalf("later claims of a decided key and a new batch key:\n%s", describe(got))
	}
	// The same key under another tenant is another key.
	if got = run(claimRecord("u", "k", "r7", "A-9")); len(got) != 2 {
		t.Fatalf("the key under another tenant:\n%s", describe(got))
	}
	// Malformed claims: dead-lettered, nothing forwarded.
	wrongKey := claimRecord("t", "m", "r8", "M-1")
	wrongKey.Key = []byte("t\nother")
	badID := claimRecord("t", "n", "r9", "N-1")
	badID.Value = []byte(strings.Replace(string(badID.Value), receipt.EventID("t", "n", 0), receipt.EventID("t", "x", 0), 1))
	got = run(&kgo.Record{Topic: "claims", Key: []byte("t\nz"), Value: []byte("not json")}, wrongKey, badID)
	var reasons []string
	for _, r := range got {
		for _, h := range r.Headers {
			if h.Key == HeaderReason {
				reasons = append(reasons, string(h.Value))
			}
		}
	}
	if len(reasons) != len(got) {
		t.Fatalf("a malformed claim produced more than its dead letter:\n%s", describe(got))
	}
	if strings.Join(reasons, " ") != "invalid:value invalid:value invalid:eventId" {
		t.Fatalf("dead-letter reasons %v", reasons)
	}
}
