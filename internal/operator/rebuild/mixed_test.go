package rebuild

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/processor"
)

const mixedTemplate = `name: %s
kafka:
  brokers: [%s]
  instanceId: t1
  input: [%s]
state: {dir: %q}
http: {listen: "off"}
projections:
  - name: overview
    topic: overview.v1
    aggregateTypes: [RegulatoryCase]
    events: {CaseOpened: merge, CaseUpdated: merge, CaseEscalated: merge, CaseCommented: merge, CaseClosed: delete}
  - name: activity
    topic: activity.v1
    versioned: false
    aggregateTypes: [RegulatoryCase]
    events: {CaseOpened: merge, CaseUpdated: merge, CaseEscalated: merge, CaseCommented: merge, CaseClosed: delete}
`

// withUnversioned inserts, after every 10th record of recs, an event of the
// same aggregate without aggregateVersion (a CaseCommented), and re-delivers
// every third of them later: the events a versioned projection rejects and
// an unversioned one applies.
func withUnversioned(t *testing.T, recs []workload.Record) (out []workload.Record, notes int) {
	t.Helper()
	var later []workload.Record
	for i, r := range recs {
		out = append(out, r)
		if i%10 != 9 || r.Kind != workload.KindEvent {
			continue
		}
		v := fmt.Sprintf(`{"eventId":"note-%d","eventType":"CaseCommented","aggregateType":"RegulatoryCase","aggregateId":%q,"payload":{"comment":"c%d"}}`,
			i, string(r.Key), i)
		nr := workload.Record{Key: r.Key, Value: []byte(v)}
		out = append(out, nr)
		notes++
		if notes%3 == 0 {
			later = append(later, nr)
		}
		if len(later) > 0 && i%100 == 99 {
			out = append(out, later[0]) // a redelivery, at a later offset
			later = later[1:]
		}
	}
	return append(out, later...), notes
}

// TestRebuildEqualsLiveVersionedAndUnversioned: a versioned and an
// unversioned projection over the same events, some of them without
// aggregateVersion (and some of those re-delivered). Live, those events are
// dead-lettered for the versioned projection only, once per record, and
// applied by the unversioned one; a rebuild of each projection alone equals
// its live topic key for key.
func TestRebuildEqualsLiveVersionedAndUnversioned(t *testing.T) {
	f := newFixture(t)
	body := fmt.Sprintf(mixedTemplate, liveName, f.brokers[0], input, filepath.Join(f.dir, "state"))
	cfg, err := config.Parse([]byte(body), os.LookupEnv)
	if err != nil {
		t.Fatal(err)
	}
	o := workloadOptions(20_000, 23)
	base, exp := testkitGenerate(o)
	recs, notes := withUnversioned(t, base)
	produce(t, f.brokers, recs)

	a := startLive(t, cfg)
	waitCaughtUp(t, f.brokers, liveName)

	for _, c := range []struct{ projection, live, rebuilt string }{
		{"activity", "activity.v1", "activity.v2"},
		{"overview", "overview.v1", "overview.v2"},
	} {
		rebuildNow(t, Options{Config: cfg, Projection: c.projection, Topic: c.rebuilt})
		rep := diff(t, f.brokers, c.live, c.rebuilt, 5)
		if !rep.Identical() {
			var b strings.Builder
			rep.Write(&b)
			t.Errorf("%s: rebuilt topic differs from live:\n%s", c.projection, b.String())
		}
		t.Logf("%s: %d keys, %d different, %d missing", c.projection, rep.Keys, rep.Different, rep.MissingInA+rep.MissingInB)
	}

	// The versioned projection is the reference fold (the notes rejected);
	// the unversioned one applied the notes.
	ctxR, cancelR := context.WithTimeout(context.Background(), time.Minute)
	defer cancelR()
	out, err := testkit.ReadAll(ctxR, f.brokers, "overview.v1")
	if err != nil {
		t.Fatal(err)
	}
	if cr := testkit.CheckProjection(out, exp.Final); !cr.OK() {
		t.Errorf("live versioned projection against the reference fold: %s", cr)
	}
	act, err := testkit.ReadAll(ctxR, f.brokers, "activity.v1")
	if err != nil {
		t.Fatal(err)
	}
	commented := 0
	for _, e := range Latest(act) {
		if strings.Contains(string(e.State), `"comment":`) {
			commented++
		}
	}
	if commented == 0 {
		t.Errorf("the unversioned projection applied no event without aggregateVersion")
	}
	st := a.Processor.Stats()
	if got := st.Events("overview", processor.OutcomeInvalid); got != int64(notes) {
		t.Errorf("overview: %d invalid, want %d (one per event without aggregateVersion)", got, notes)
	}
	if got := st.Events("activity", processor.OutcomeInvalid); got != 0 {
		t.Errorf("activity: %d invalid, want 0", got)
	}
	redelivered := len(recs) - len(base) - notes
	if got := st.Events("activity", processor.OutcomeDuplicate) - st.Events("overview", processor.OutcomeDuplicate); got != 0 {
		t.Errorf("activity counted %d more duplicates than overview: a redelivery must be a duplicate for both", got)
	}
	if st.Events("activity", processor.OutcomeDuplicate) < int64(redelivered) {
		t.Errorf("activity: %d duplicates, want ≥ %d redelivered notes", st.Events("activity", processor.OutcomeDuplicate), redelivered)
	}
	dls, err := testkit.ReadAll(ctxR, f.brokers, cfg.Kafka.DeadLetterTopic)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(dls), exp.Invalid+exp.Conflicts+notes; got != want {
		t.Errorf("live dead letters: %d, want %d (one per note, none per redelivery)", got, want)
	}
	versionDLs := 0
	for _, r := range dls {
		var reason, msg string
		for _, h := range r.Headers {
			switch h.Key {
			case processor.HeaderReason:
				reason = string(h.Value)
			case processor.HeaderError:
				msg = string(h.Value)
			}
		}
		if reason != "invalid:aggregateVersion" || !strings.HasPrefix(string(r.Value), `{"eventId":"note-`) {
			continue
		}
		versionDLs++
		if !strings.HasSuffix(msg, "required by versioned projection overview") {
			t.Errorf("dead letter of %s: error %q, want it to name overview only", r.Value, msg)
			break
		}
	}
	if versionDLs != notes {
		t.Errorf("%d invalid:aggregateVersion dead letters of the events without version, want %d", versionDLs, notes)
	}
	t.Logf("%d records: %d events without aggregateVersion, %d re-delivered; %d activity keys show a comment",
		len(recs), notes, redelivered, commented)
}
