package rebuild

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/topicread"
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
		Version *int64          `json:"version"`
		State   json.RawMessage `json:"state"`
	}
	if err := json.Unmarshal(v, &pv); err != nil || pv.Version == nil {
		return Entry{Raw: bytes.Clone(v)}
	}
	return Entry{Version: *pv.Version, State: pv.State}
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
		if d := &diffs[i]; d.Kind == Different {
			d.What = what(d.A, d.B)
		}
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
}

// DiffOptions configure Diff.
type DiffOptions struct {
	Brokers    []string
	ClientOpts []kgo.Opt // TLS, SASL
	A, B       string    // topics
	Max        int       // how many differences to list (DefaultDiffMax is the CLI's); negative lists all
}

// ErrNoTopic reports a topic that does not exist.
var ErrNoTopic = errors.New("rebuild: topic does not exist")

// Diff reads both topics read_committed up to their end offsets at the time
// of the call and compares them key by key.
func Diff(ctx context.Context, o DiffOptions) (*DiffReport, error) {
	type read struct {
		m   map[string]Entry
		n   int
		err error
	}
	// Both topics are read at once; the first failure stops the other read.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ra, rb := make(chan read, 1), make(chan read, 1)
	for _, x := range []struct {
		topic string
		c     chan read
	}{{o.A, ra}, {o.B, rb}} {
		go func() {
			m, n, err := ReadLatest(rctx, o.Brokers, o.ClientOpts, x.topic)
			if err != nil {
				cancel()
			}
			x.c <- read{m, n, err}
		}()
	}
	a, b := <-ra, <-rb
	for _, err := range []error{a.err, b.err} {
		if err != nil && (ctx.Err() != nil || !errors.Is(err, context.Canceled)) {
			return nil, err
		}
	}
	if err := errors.Join(a.err, b.err); err != nil {
		return nil, err
	}
	r := Compare(a.m, b.m, o.Max)
	r.A, r.B, r.RecordsA, r.RecordsB = o.A, o.B, a.n, b.n
	return &r, nil
}

// ReadLatest reads topic read_committed from the start to its last stable
// offsets at the time of the call and returns the last entry per key and the
// number of records read.
func ReadLatest(ctx context.Context, brokers []string, copts []kgo.Opt, topic string) (map[string]Entry, int, error) {
	out := map[string]Entry{}
	n := 0
	err := topicread.Committed(ctx, append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, copts...), topic, func(r *kgo.Record) {
		n++
		out[string(r.Key)] = entryOf(r.Value)
	})
	if errors.Is(err, topicread.ErrNoTopic) {
		return nil, 0, fmt.Errorf("%w: %s", ErrNoTopic, topic)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("rebuild: %w", err)
	}
	return out, n, nil
}
