package rebuild

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/twmb/franz-go/pkg/kgo"
)

// DefaultDiffMax is how many non-equal keys a DiffReport lists by default.
const DefaultDiffMax = 20

// Entry is the last committed record of one key of a projection topic.
type Entry struct {
	Deleted bool // the last record is a tombstone
	Version int64
	State   json.RawMessage
	// Raw is the value when it is not a projection record (compared as bytes).
	Raw []byte
	// LastEventID and OccurredAt are the record's lastEventId and
	// occurredAt: not compared, they name a difference's likely cause.
	LastEventID, OccurredAt string
}

func (e Entry) String() string {
	switch {
	case e.Deleted:
		return "deleted"
	case e.Raw != nil:
		return "undecodable " + clip(string(e.Raw), 60)
	}
	return fmt.Sprintf("v%d %s", e.Version, clip(string(e.State), 60))
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-1] + "…"
}

// Latest keeps the last record of every key (records in offset order per
// partition; a key lives in one partition).
func Latest(recs []*kgo.Record) map[string]Entry {
	m := make(map[string]Entry)
	for _, r := range recs {
		m[string(r.Key)] = entryOf(r.Value)
	}
	return m
}

func entryOf(v []byte) Entry {
	if v == nil {
		return Entry{Deleted: true}
	}
	var pv struct {
		Version     *int64          `json:"version"`
		State       json.RawMessage `json:"state"`
		LastEventID string          `json:"lastEventId"`
		OccurredAt  string          `json:"occurredAt"`
	}
	if err := json.Unmarshal(v, &pv); err != nil || pv.Version == nil {
		return Entry{Raw: bytes.Clone(v)}
	}
	return Entry{Version: *pv.Version, State: pv.State, LastEventID: pv.LastEventID, OccurredAt: pv.OccurredAt}
}

// Kind classifies one key of a diff.
type Kind string

// Diff kinds.
const (
	Equal      Kind = "equal"
	Different  Kind = "different"
	MissingInA Kind = "missing in A"
	MissingInB Kind = "missing in B"
)

// Difference is one key that is not equal.
type Difference struct {
	Key  string
	Kind Kind
	A, B *Entry // nil when the topic has no record for the key
	// What differs when both have a state: "version" and the top-level
	// state members that differ (or "state" when a state is not an object).
	What []string
	// Cause is the likely cause, from what the two records show (versions,
	// lastEventId, occurredAt); see Cause.
	Cause string
}

// DiffReport compares two projection topics key by key.
type DiffReport struct {
	A, B                 string // topic names
	RecordsA, RecordsB   int
	Keys                 int // keys in either topic
	Equal, Different     int
	MissingInA           int // keys with a current state only in B
	MissingInB           int // keys with a current state only in A
	Differences          []Difference
	DifferencesTruncated bool // more non-equal keys than listed
}

// Identical reports whether every key is equal.
func (r *DiffReport) Identical() bool { return r.Different+r.MissingInA+r.MissingInB == 0 }

// Compare compares the last records per key of two topics. A key is equal
// when both have the same version and JSON-equal state, or when neither has a
// current state (a tombstone, or no record: compaction removes tombstones
// eventually). A key with a state in one topic and a tombstone in the other is
// different; with a state in one topic and no record at all in the other it
// is missing from that other topic. Other fields of the projection record
// (lastEventId, occurredAt …) are not compared. max bounds the listed
// differences (sorted by key); a negative max lists all.
func Compare(a, b map[string]Entry, max int) DiffReport {
	var r DiffReport
	var diffs []Difference
	seen := func(k string) {
		ea, okA := a[k]
		eb, okB := b[k]
		kind := compareEntries(ea, okA, eb, okB)
		switch kind {
		case Equal:
			r.Equal++
			return
		case Different:
			r.Different++
		case MissingInA:
			r.MissingInA++
		case MissingInB:
			r.MissingInB++
		}
		d := Difference{Key: k, Kind: kind}
		if okA {
			d.A = &ea
		}
		if okB {
			d.B = &eb
		}
		diffs = append(diffs, d)
	}
	for k := range a {
		seen(k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			seen(k)
		}
	}
	r.Keys = r.Equal + r.Different + r.MissingInA + r.MissingInB
	sort.Slice(diffs, func(i, j int) bool { return diffs[i].Key < diffs[j].Key })
	if max >= 0 && len(diffs) > max {
		diffs, r.DifferencesTruncated = diffs[:max], true
	}
	for i := range diffs {
		d := &diffs[i]
		if d.Kind == Different {
			d.What = what(d.A, d.B)
		}
		d.Cause = Cause(d.A, d.B)
	}
	r.Differences = diffs
	return r
}

// what names what differs between two states.
func what(a, b *Entry) []string {
	if a == nil || b == nil || a.Deleted || b.Deleted || a.Raw != nil || b.Raw != nil {
		return nil
	}
	var out []string
	if a.Version != b.Version {
		out = append(out, "version")
	}
	var ma, mb map[string]any
	if json.Unmarshal(a.State, &ma) != nil || json.Unmarshal(b.State, &mb) != nil || ma == nil || mb == nil {
		if !jsonEqual(a.State, b.State) {
			out = append(out, "state")
		}
		return out
	}
	var fields []string
	for k, va := range ma {
		if vb, ok := mb[k]; !ok || !reflect.DeepEqual(va, vb) {
			fields = append(fields, "state."+k)
		}
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			fields = append(fields, "state."+k)
		}
	}
	sort.Strings(fields)
	return append(out, fields...)
}

// Cause names the likely cause of a difference between A and B (nil: no
// record), from what the two records show. The inherent differences between
// a rebuild and the live worker (docs/rebuild.md) are the usual ones: a gap
// policy that is time based (live held a version gap that the replay filled
// at once, or a gap expired and was skipped in one of them), dedup
// retention (a redelivery older than the retention was applied again where
// its first delivery had been forgotten), a rebuild not caught up or started
// with --from, and a changed rule.
func Cause(a, b *Entry) string {
	live := func(e *Entry) bool { return e != nil && !e.Deleted }
	switch {
	case !live(a) && !live(b):
		return ""
	case a == nil || b == nil:
		only, other := "A", "B"
		if a == nil {
			only, other = "B", "A"
		}
		return "key only in " + only + ": " + other + " never applied its events (not caught up, a rebuild started with --from after them, or every event of the key dead-lettered or held in " + other + ")"
	case a.Deleted || b.Deleted:
		del, st := "A", "B"
		if b.Deleted {
			del, st = "B", "A"
		}
		return "tombstone in " + del + ", state in " + st + ": the delete was applied in " + del + " only, or events after it only in " + st + " (a version gap held in one and skipped by a time-based gap policy in the other, or a redelivery applied again after dedup retention expired)"
	case a.Raw != nil || b.Raw != nil:
		return "not a projection record in one of them: a different writer on the topic"
	}
	sameEvent := a.LastEventID != "" && a.LastEventID == b.LastEventID
	at := func(e *Entry) string {
		if e.OccurredAt == "" {
			return e.LastEventID
		}
		return e.LastEventID + " occurred " + e.OccurredAt
	}
	switch {
	case a.Version == b.Version && sameEvent:
		return "same version and last event, different state: the rules differ (a changed rule or handler)"
	case a.Version == b.Version:
		return fmt.Sprintf("same version from different events (A %s, B %s): an event id applied again after dedup retention expired in one of them, or different input", at(a), at(b))
	case sameEvent:
		return fmt.Sprintf("same last event %s at v%d in A, v%d in B: the version counts applications (unversioned projection), so one of them applied an event twice: a redelivery after dedup retention expired (or missed one)", a.LastEventID, a.Version, b.Version)
	}
	behind, ahead, vb, va := "A", "B", a, b
	if a.Version > b.Version {
		behind, ahead, vb, va = "B", "A", b, a
	}
	return fmt.Sprintf("%s behind %s (v%d, last %s; %s v%d, last %s): a version gap held in %s, or skipped by a time-based gap policy in %s; or %s not caught up; if unversioned (the version counts applications), a redelivery applied again in %s after dedup retention expired",
		behind, ahead, vb.Version, at(vb), ahead, va.Version, at(va), behind, ahead, behind, ahead)
}

func compareEntries(a Entry, okA bool, b Entry, okB bool) Kind {
	liveA, liveB := okA && !a.Deleted, okB && !b.Deleted
	switch {
	case !liveA && !liveB:
		return Equal
	case liveA && !okB:
		return MissingInB
	case liveB && !okA:
		return MissingInA
	case liveA != liveB:
		return Different
	case a.Raw != nil || b.Raw != nil:
		if bytes.Equal(a.Raw, b.Raw) {
			return Equal
		}
		return Different
	case a.Version != b.Version || !jsonEqual(a.State, b.State):
		return Different
	}
	return Equal
}

// jsonEqual compares two JSON documents as values (member order, spacing and
// number spelling do not matter).
func jsonEqual(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// Write prints the report: the counts, then the listed differences.
func (r *DiffReport) Write(w io.Writer) {
	verdict := "identical"
	if !r.Identical() {
		verdict = "DIFFERENT"
	}
	fmt.Fprintf(w, "diff A=%s (%d records) B=%s (%d records): %d keys, %s\n", r.A, r.RecordsA, r.B, r.RecordsB, r.Keys, verdict)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  equal\t%d\n  different\t%d\n  missing in A\t%d\n  missing in B\t%d\n", r.Equal, r.Different, r.MissingInA, r.MissingInB)
	tw.Flush()
	if len(r.Differences) == 0 {
		return
	}
	more := ""
	if r.DifferencesTruncated {
		more = fmt.Sprintf(" (first %d)", len(r.Differences))
	}
	fmt.Fprintf(w, "keys that differ%s:\n", more)
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  key\tkind\twhat\tA\tB")
	show := func(e *Entry) string {
		if e == nil {
			return "(no record)"
		}
		return e.String()
	}
	for _, d := range r.Differences {
		w := strings.Join(d.What, ",")
		if w == "" {
			w = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", d.Key, d.Kind, clip(w, 40), show(d.A), show(d.B))
	}
	tw.Flush()
	fmt.Fprintln(w, "likely causes:")
	for _, d := range r.Differences {
		if d.Cause != "" {
			fmt.Fprintf(w, "  %s: %s\n", d.Key, d.Cause)
		}
	}
}
