package wiring_test

// The valid records of TestNoRecordStopsAPartition, and its accounting:
// what became of every record on every topic the worker reads.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/app/ingress"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/sideeffects"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// expected is what the valid records must produce.
type expected struct {
	versions map[string][]int64 // projection key → its versions, in order
	keys     []string           // side-effect keys the receiver must see, once each
	skips    []*kgo.Record      // valid skip-gap commands: each releases one held event
	records  []*kgo.Record      // every valid record produced directly
}

func validEvent(agg string, version int, eventType string, p int32) *kgo.Record {
	v := encode(map[string]any{"eventId": fmt.Sprintf("ev-%s-%d", agg, version), "eventType": eventType,
		"aggregateId": agg, "aggregateType": "Case", "aggregateVersion": version, "payload": map[string]any{"v": version}})
	return &kgo.Record{Topic: hpInput, Partition: p, Key: []byte(agg), Value: v}
}

// held is round r's event for partition p that waits for a skip-gap: version
// 2 of an aggregate whose version 1 never comes.
func (e *expected) held(r int, p int32) *kgo.Record {
	rec := validEvent(fmt.Sprintf("gap-%d-%d", r, p), 2, "Updated", p)
	e.records = append(e.records, rec)
	return rec
}

// round is round r's valid records after its hostile ones, on every
// partition: an aggregate's versions 1 and 2, the skip-gap of the held
// event, and an intent on the effects topic.
func (e *expected) round(r int) []*kgo.Record {
	var out []*kgo.Record
	for p := range int32(hpPartitions) {
		ok, gap, direct := fmt.Sprintf("ok-%d-%d", r, p), fmt.Sprintf("gap-%d-%d", r, p), fmt.Sprintf("direct-%d-%d", r, p)
		skip := &kgo.Record{Topic: hpInput, Partition: p, Key: []byte(gap),
			Value:   fmt.Appendf(nil, `{"op":"skip-gap","aggregate":%q,"note":"property test"}`, gap),
			Headers: []kgo.RecordHeader{{Key: processor.HeaderCommand, Value: []byte("skip-gap")}}}
		out = append(out, validEvent(ok, 1, "Opened", p), validEvent(ok, 2, "Updated", p), skip, validIntent(direct, p))
		e.skips = append(e.skips, skip)
		e.versions[ok], e.versions[gap] = []int64{1, 2}, []int64{2}
		e.keys = append(e.keys, "n:"+ok+":v1", "n:"+ok+":v2", "n:"+gap+":v2", direct)
	}
	e.records = append(e.records, out...)
	return out
}

// ingressPost is one event posted through the ingress after a round.
type ingressPost struct {
	key  string
	code int
	body string
}

// post sends round r's event through the ingress and keeps its answer: it
// waits for the committed receipt, so it needs the receipts topic read.
func (h *hostileRun) post(r int) {
	agg := fmt.Sprintf("ing-%d", r)
	body := fmt.Sprintf(`{"eventType":"Opened","aggregateId":%q,"aggregateVersion":1,"payload":{"via":"ingress"}}`, agg)
	req, _ := http.NewRequest("POST", h.ingress+"/v1/events", strings.NewReader(body))
	req.Header.Set(ingress.HeaderKey, agg)
	p := ingressPost{key: agg}
	c := http.Client{Timeout: 90 * time.Second}
	if resp, err := c.Do(req); err != nil {
		p.body = err.Error()
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		p.code, p.body = resp.StatusCode, string(b)
	}
	h.posts = append(h.posts, p)
	h.valid.versions[agg] = []int64{1}
	h.valid.keys = append(h.valid.keys, "n:"+agg+":v1")
}

// settle waits until the processor caught up, every expected call was made
// and every record is accounted for. (The executor's group is not waited
// for by its offsets: the processor writes the effects topic in
// transactions, and a group's committed offset stops short of the last
// commit marker. Its account balancing is the executor's catching up.)
func (h *hostileRun) settle() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx(), 5*time.Minute)
	err := testkit.WaitCaughtUp(ctx, h.brokers, hpName, hpInput)
	cancel()
	h.failIfStopped("the processor to catch up")
	if err != nil {
		h.report()
		h.t.Fatal(err)
	}
	h.waitFor(3*time.Minute, "every expected side effect", func() bool {
		for _, k := range h.valid.keys {
			if h.rc.Key(k).Created == 0 {
				return false
			}
		}
		return true
	})
	// The counters are published after each commit's Pebble write, and
	// ledger entries of hostile keys may still be retried: wait for the
	// books to balance, then check them (check reports what does not).
	_ = testkit.WaitFor(h.ctx(), 2*time.Minute, func() bool {
		h.final, h.books = h.accounts()
		for _, a := range h.final {
			if a.unaccounted() != 0 || len(a.problems) > 0 {
				return false
			}
		}
		return true
	})
	h.failIfStopped("the books to balance")
}

// account is what became of the records of one topic.
type account struct {
	topic                   string
	records, hostile, valid int
	outcomes                map[string]int64 // counters (processor, executor) or what the view did
	deadLetters             map[string]int   // by projector-reason
	ledger                  map[string]int   // effects: ledger entries by status at the end
	equation                string           // records = their fates, in figures
	missing                 int              // records with no outcome and no dead letter
	problems                []string
}

func (a *account) unaccounted() int { return a.missing }

func (a *account) problem(format string, args ...any) {
	if len(a.problems) < 20 {
		a.problems = append(a.problems, fmt.Sprintf(format, args...))
	}
}

func (a *account) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d records (%d hostile, %d valid, %d written by the worker or its ingress); outcomes",
		a.topic, a.records, a.hostile, a.valid, a.records-a.hostile-a.valid)
	for _, k := range slices.Sorted(maps.Keys(a.outcomes)) {
		fmt.Fprintf(&b, " %s %d", k, a.outcomes[k])
	}
	b.WriteString("; dead letters")
	for _, k := range slices.Sorted(maps.Keys(a.deadLetters)) {
		fmt.Fprintf(&b, " %s %d", k, a.deadLetters[k])
	}
	if a.ledger != nil {
		b.WriteString("; ledger entries")
		for _, k := range slices.Sorted(maps.Keys(a.ledger)) {
			fmt.Fprintf(&b, " %s %d", k, a.ledger[k])
		}
	}
	fmt.Fprintf(&b, "; unaccounted %d", a.missing)
	if a.equation != "" {
		fmt.Fprintf(&b, "\n\t%s", a.equation)
	}
	return b.String()
}

// books is the committed state the accounts are drawn from.
type books struct {
	input, effects, receipts, projection, ledger []*kgo.Record
	dead                                         map[string][]testkit.DeadLetter // by source
}

func (h *hostileRun) read() (books, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var b books
	var err error
	for _, r := range []struct {
		topic string
		into  *[]*kgo.Record
	}{{hpInput, &b.input}, {hpEffects, &b.effects}, {hpReceipts, &b.receipts}, {hpProj, &b.projection},
		{sideeffects.ChangelogTopic(hpName, hpEffects), &b.ledger}} {
		if *r.into, err = testkit.ReadAll(ctx, h.brokers, r.topic); err != nil {
			return b, fmt.Errorf("read %s: %w", r.topic, err)
		}
	}
	dlq, err := testkit.ReadAll(ctx, h.brokers, hpDLQ)
	if err != nil {
		return b, err
	}
	b.dead = map[string][]testkit.DeadLetter{}
	for _, d := range testkit.DeadLetters(dlq) {
		b.dead[d.Source] = append(b.dead[d.Source], d)
	}
	return b, nil
}

// accounts reads the books and draws up the account of each topic the
// worker reads.
func (h *hostileRun) accounts() ([]*account, books) {
	b, err := h.read()
	if err != nil {
		return []*account{{topic: "books", problems: []string{err.Error()}, missing: -1}}, b
	}
	return []*account{h.inputAccount(b), h.effectsAccount(b), h.receiptsAccount(b)}, b
}

// origins counts the hostile and valid records among recs.
func (h *hostileRun) origins(a *account, recs []*kgo.Record) {
	valid := map[string]bool{}
	for _, r := range h.valid.records {
		valid[source(r)] = true
	}
	for _, r := range recs {
		switch {
		case h.produced[source(r)] != nil:
			a.hostile++
		case valid[source(r)]:
			a.valid++
		}
	}
}

// deadLetters checks and counts the dead letters of recs: each with a
// reason, at most one per record, none for a valid record; and every
// hostile record that must have its own dead letter has one.
func (h *hostileRun) deadLetters(a *account, b books, recs []*kgo.Record) (dead map[string]bool) {
	a.deadLetters, dead = map[string]int{}, map[string]bool{}
	valid := map[string]bool{}
	for _, r := range h.valid.records {
		valid[source(r)] = true
	}
	for _, r := range recs {
		src := source(r)
		ds := b.dead[src]
		for _, d := range ds {
			a.deadLetters[d.Reason]++
			if d.Reason == "" {
				a.problem("dead letter of %s without a projector-reason", src)
			}
		}
		switch hs := h.produced[src]; {
		case len(ds) > 1:
			a.problem("%s has %d dead letters", src, len(ds))
		case len(ds) == 1 && valid[src]:
			a.problem("valid record %s dead-lettered %s: %s", src, ds[0].Reason, ds[0].Error)
		case len(ds) == 0 && hs != nil && hs.ownDeadLetter:
			a.problem("%s record %s (%s) has no dead letter", hs.kind, src, trim(r.Value))
		}
		dead[src] = len(ds) > 0
	}
	return dead
}

// appliedButNoEffect starts the dead letter of an applied event whose side
// effect could not be built (its outcome is applied).
const appliedButNoEffect = "event applied, but a side effect could not be built"

// inputAccount: every input record is an event, which gets exactly one
// first outcome (projector_events_total; a held event released by a valid
// skip-gap counts applied once more) and, when that outcome is invalid,
// conflict, too-large or failed, one dead letter; or a command, applied
// (the valid skip-gaps) or dead-lettered.
func (h *hostileRun) inputAccount(b books) *account {
	a := &account{topic: hpInput, records: len(b.input), outcomes: map[string]int64{}}
	h.origins(a, b.input)
	dead := h.deadLetters(a, b, b.input)
	st := h.a.Processor.Stats()
	var outcomes int64
	for _, o := range processor.Outcomes {
		for _, p := range []string{"cases", ""} {
			if n := st.Events(p, o); n > 0 {
				a.outcomes[o.String()] += n
				outcomes += n
			}
		}
	}
	commands, deadCommands, deadEvents := 0, 0, int64(0)
	for _, r := range b.input {
		switch {
		case isCommand(r):
			commands++
			if dead[source(r)] {
				deadCommands++
			}
		case dead[source(r)] && !strings.HasPrefix(b.dead[source(r)][0].Error, appliedButNoEffect):
			deadEvents++
		}
	}
	// The outcomes the contract dead-letters, one dead letter per record.
	if want := a.outcomes["invalid"] + a.outcomes["conflict"] + a.outcomes["too-large"] + a.outcomes["failed"]; deadEvents != want {
		a.missing += int(want - deadEvents)
		a.problem("%d events dead-lettered (invalid, conflict, too-large, failed), %d such outcomes counted", deadEvents, want)
	}
	skips := int64(len(h.valid.skips))
	a.outcomes["skip-gap applied"] = skips
	events := int64(len(b.input) - commands)
	if first := outcomes - skips; first != events {
		a.missing += int(events - first)
		a.problem("%d events, %d first outcomes counted", events, first)
	}
	if n := commands - deadCommands - int(skips); n != 0 {
		a.missing += n
		a.problem("%d commands: %d dead-lettered, %d valid skip-gaps", commands, deadCommands, skips)
	}
	a.equation = fmt.Sprintf("%d records = %d events (%d first outcomes counted) + %d commands (%d dead-lettered, %d skip-gaps applied)",
		len(b.input), events, outcomes-skips, commands, deadCommands, skips)
	return a
}

// effectsAccount: every effects-topic record is an intent offered (a new
// ledger entry, or a duplicate counted), a command applied (resolved), or
// a dead letter. An outcome report that no longer applies changes nothing
// and has no dead letter: it shows here as unaccounted (issue 22 wants it
// dead-lettered).
func (h *hostileRun) effectsAccount(b books) *account {
	a := &account{topic: hpEffects, records: len(b.effects), outcomes: map[string]int64{}, ledger: map[string]int{}}
	h.origins(a, b.effects)
	dead := h.deadLetters(a, b, b.effects)
	latest := map[string][]byte{} // partition/key → the entry's last changelog value
	for _, r := range b.ledger {
		if len(r.Key) > 0 && r.Key[0] == effect.KeyPrefix {
			latest[fmt.Sprintf("%d/%s", r.Partition, r.Key[1:])] = r.Value
		}
	}
	entries := map[string]effect.Entry{}
	for k, v := range latest {
		if e, err := effect.DecodeEntry(v); err == nil {
			entries[k] = e
		} else if v != nil {
			a.problem("ledger entry %s does not decode: %v", trim([]byte(k)), err)
		}
	}
	// The effect names intents carry: the configured ones, the ghost, and
	// every string the generators put in an intent's effect member.
	names := map[string]bool{"notify": true, "byref": true, ghostEffect: true}
	for _, v := range wrongValues {
		if s, ok := v.(string); ok {
			names[s] = true
		}
	}
	ws := h.a.Executor.Stats()
	a.outcomes["offered"] = int64(len(entries))
	for n := range names {
		a.outcomes["duplicate"] += ws.Duplicates(n)
		a.outcomes["resolved"] += ws.Resolved(n)
	}
	nDead := 0
	for _, d := range dead {
		if d {
			nDead++
		}
	}
	if n := int64(len(b.effects)) - a.outcomes["offered"] - a.outcomes["duplicate"] - a.outcomes["resolved"] - int64(nDead); n != 0 {
		a.missing += int(n)
		a.problem("%d records: %d offered, %d duplicates, %d resolved, %d dead-lettered", len(b.effects),
			a.outcomes["offered"], a.outcomes["duplicate"], a.outcomes["resolved"], nDead)
	}
	a.equation = fmt.Sprintf("%d records = %d intents offered (new ledger entries) + %d duplicates + %d commands resolved + %d dead-lettered",
		len(b.effects), a.outcomes["offered"], a.outcomes["duplicate"], a.outcomes["resolved"], nDead)
	for k, e := range entries {
		configured := e.Effect == "notify" || e.Effect == "byref"
		if !configured {
			a.ledger["other effects "+e.Status.String()]++
			continue
		}
		a.ledger[e.Status.String()]++
		if !e.Status.Terminal() {
			a.problem("ledger entry %s of %s is %s after %d attempts (%s)", trim([]byte(k)), e.Effect, e.Status, e.Attempts, lastError(e))
		}
		if e.Status == effect.Failed && headerSafe(e.Key) {
			a.problem("ledger entry %s of %s failed after %d attempts: %s", trim([]byte(k)), e.Effect, e.Attempts, lastError(e))
		}
	}
	return a
}

// headerSafe reports whether an HTTP header can carry key as its value
// (net/http refuses control characters other than tab). A key it cannot
// carry is never sent: its entry ends failed, with the client's error.
func headerSafe(key string) bool {
	for i := 0; i < len(key); i++ {
		if c := key[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func lastError(e effect.Entry) string {
	if n := len(e.History); n > 0 {
		return trim([]byte(e.History[n-1].Error))
	}
	return ""
}

// receiptsAccount: the ingress's view skips a malformed receipt with a
// warning, ignores a tombstone and takes in a well-formed one (looked up
// through GET /v1/receipts); the processor's receipts are what answered the
// posts.
func (h *hostileRun) receiptsAccount(b books) *account {
	a := &account{topic: hpReceipts, records: len(b.receipts), outcomes: map[string]int64{}, deadLetters: map[string]int{}}
	h.origins(a, b.receipts)
	var malformed, tombstones, forged int
	for _, hs := range h.hostile {
		switch {
		case hs.rec.Topic != hpReceipts:
		case hs.forged != "":
			forged++
			if code := h.getReceipt(hs.forged); code != http.StatusOK {
				a.problem("forged receipt %q: GET answered %d, want 200 (the view took it in)", hs.forged, code)
			} else {
				a.outcomes["taken in"]++
			}
		case hs.rec.Value == nil:
			tombstones++
		default:
			malformed++
		}
	}
	a.outcomes["ignored tombstone"] = int64(tombstones)
	a.outcomes["skipped with a warning"] = int64(h.logs.count("receipts: malformed record skipped"))
	if n := malformed - int(a.outcomes["skipped with a warning"]); n != 0 {
		a.missing += n
		a.problem("%d malformed receipts, %d skipped with a warning", malformed, a.outcomes["skipped with a warning"])
	}
	a.missing += forged - int(a.outcomes["taken in"])
	a.equation = fmt.Sprintf("%d records = %d malformed (%d skipped with a warning) + %d tombstones (ignored) + %d well-formed hostile (%d taken in) + %d the processor's",
		len(b.receipts), malformed, a.outcomes["skipped with a warning"], tombstones, forged, a.outcomes["taken in"], a.records-a.hostile)
	return a
}

func (h *hostileRun) getReceipt(key string) int {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(h.ingress + "/v1/receipts/" + url.PathEscape(key) + "?tenant=forged")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func trim(b []byte) string {
	if len(b) > 80 {
		return fmt.Sprintf("%q…[%d bytes]", b[:80], len(b))
	}
	return fmt.Sprintf("%q", b)
}

// check asserts the property once the run settled.
func (h *hostileRun) check() {
	h.t.Helper()
	h.failIfStopped("the check")
	if ok, why := h.a.Ready(); !ok {
		h.t.Errorf("not ready at the end: %s", why)
	}
	if code := h.readyz(); code != http.StatusOK {
		h.t.Errorf("GET /readyz = %d at the end, want 200", code)
	}
	for _, a := range h.logAccounts(h.final, h.books) {
		for _, p := range a.problems {
			h.t.Errorf("%s: %s", a.topic, p)
		}
		if a.missing != 0 {
			h.t.Errorf("%s: %d records unaccounted (no outcome, no dead letter)", a.topic, a.missing)
		}
	}
	h.checkValid()
}

// checkValid: every valid record was processed – its projection records,
// exactly – and every call made once; no key of any record was called twice.
func (h *hostileRun) checkValid() {
	h.t.Helper()
	recs, err := testkit.ReadAll(context.Background(), h.brokers, hpProj)
	if err != nil {
		h.t.Fatal(err)
	}
	got := map[string][]int64{}
	for _, r := range recs {
		var v testkit.ProjectionValue
		if r.Value != nil && json.Unmarshal(r.Value, &v) == nil {
			got[string(r.Key)] = append(got[string(r.Key)], v.Version)
		}
	}
	for k, vs := range got {
		if len(slices.Compact(slices.Clone(vs))) != len(vs) || !slices.IsSorted(vs) {
			h.t.Errorf("projection key %s: versions %v (a version repeated or out of order)", trim([]byte(k)), vs)
		}
	}
	for k, want := range h.valid.versions {
		if !slices.Equal(got[k], want) {
			h.t.Errorf("valid aggregate %s: projection versions %v, want %v", k, got[k], want)
		}
	}
	for _, k := range h.valid.keys {
		if s := h.rc.Key(k); s.Requests != 1 || s.Created != 1 {
			h.t.Errorf("valid side effect %s: %d requests, %d applied; want 1, 1", k, s.Requests, s.Created)
		}
	}
	for k, s := range h.rc.Keys() {
		if s.Requests > 1 || s.MaxOpen > 1 {
			h.t.Errorf("key %s called %d times (%d applied, %d replays, %d conflicts, at most %d at once); want once",
				trim([]byte(k)), s.Requests, s.Created, s.Replays, s.Conflicts, s.MaxOpen)
		}
	}
	for _, p := range h.posts {
		if p.code != http.StatusCreated || !strings.Contains(p.body, `"outcome":"applied"`) {
			h.t.Errorf("ingress POST %s: %d %s; want 201 applied", p.key, p.code, trim([]byte(p.body)))
		}
	}
}

// report logs what the run reached: each topic's account now and, per
// hostile kind, what became of its records.
func (h *hostileRun) report() {
	h.logAccounts(h.accounts())
}

// logAccounts logs the accounts and, per hostile kind, what became of its
// records in the books b; it returns the accounts.
func (h *hostileRun) logAccounts(accts []*account, b books) []*account {
	for _, a := range accts {
		h.t.Log(a)
	}
	type kindFate struct {
		topic      string
		n, noDead  int
		deadLetter map[string]int
		example    map[string]string // reason → the first dead letter's projector-error
	}
	kinds := map[string]*kindFate{}
	for _, hs := range h.hostile {
		f := kinds[hs.kind]
		if f == nil {
			f = &kindFate{topic: hs.rec.Topic, deadLetter: map[string]int{}, example: map[string]string{}}
			kinds[hs.kind] = f
		}
		f.n++
		ds := b.dead[source(hs.rec)]
		if len(ds) == 0 {
			f.noDead++
		}
		for _, d := range ds {
			f.deadLetter[d.Reason]++
			if _, ok := f.example[d.Reason]; !ok {
				f.example[d.Reason] = trim([]byte(d.Error))
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		f := kinds[k]
		h.t.Logf("  %-20s %-11s %4d records: %4d without a dead letter; dead letters %v", k, f.topic, f.n, f.noDead, f.deadLetter)
		for _, r := range slices.Sorted(maps.Keys(f.example)) {
			h.t.Logf("  %-20s   e.g. %s: %s", "", r, f.example[r])
		}
	}
	return accts
}
