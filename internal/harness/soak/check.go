package soak

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/topicread"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
)

// Figure is the fault-matrix figure line (docs/reliability.md): what was
// injected, then what the checkers found.
type Figure struct {
	Events, Dupes, Crashes, Aborts, Faults int
	Seed                                   uint64

	Dup, Lost, AbortedVisible, NonMonotonic, Diff int
	// Unexpected keys (not in the reference) and dead-letter problems are
	// counted into Diff: both are a projection that differs from the model.

	// Effects is the side-effect part, when the run had side effects.
	Effects *EffectsReport
}

func (f Figure) String() string {
	return fmt.Sprintf("%d events, %d dupes injected, %d crashes, %d aborts, %d faults; output dup %d, lost %d, aborted-visible %d, nonmonotonic %d, projection diff %d, seed %d",
		f.Events, f.Dupes, f.Crashes, f.Aborts, f.Faults, f.Dup, f.Lost, f.AbortedVisible, f.NonMonotonic, f.Diff, f.Seed) + f.effects()
}

func (f Figure) effects() string {
	if f.Effects == nil {
		return ""
	}
	return "; " + f.Effects.String()
}

// OK reports whether every checker came back clean.
func (f Figure) OK() bool {
	return f.Dup == 0 && f.Lost == 0 && f.AbortedVisible == 0 && f.NonMonotonic == 0 && f.Diff == 0 &&
		(f.Effects == nil || f.Effects.OK())
}

// Checked is the outcome of Check: the figure's checker columns plus detail.
type Checked struct {
	Projection        testkit.Report
	DeadLetterProblem []string
	Txn               TxnReport
	Effects           *EffectsReport // nil without side effects
}

// Apply copies the checker results into f.
func (c Checked) Apply(f *Figure) {
	f.Dup = c.Projection.Dup
	f.Lost = c.Projection.Lost
	f.NonMonotonic = c.Projection.NonMonotonic
	f.Diff = c.Projection.Diff + c.Projection.Unexpected + len(c.DeadLetterProblem)
	f.AbortedVisible = c.Txn.AbortedVisible + c.Txn.UndecidedVisible
	f.Aborts = c.Txn.AbortMarkers
	f.Effects = c.Effects
}

// OK reports whether all checks passed.
func (c Checked) OK() bool {
	return c.Projection.OK() && len(c.DeadLetterProblem) == 0 && c.Txn.AbortedVisible == 0 && c.Txn.UndecidedVisible == 0 &&
		(c.Effects == nil || c.Effects.OK())
}

func (c Checked) String() string {
	s := fmt.Sprintf("projection: %s; transactions: %s", c.Projection, c.Txn)
	if n := len(c.DeadLetterProblem); n > 0 {
		s += fmt.Sprintf("; %d dead-letter problems, first: %v", n, c.DeadLetterProblem[:min(n, 5)])
	}
	if c.Effects != nil {
		s += "; " + c.Effects.String()
		if len(c.Effects.First) > 0 {
			s += fmt.Sprintf(" %v", c.Effects.First)
		}
	}
	return s
}

// Check runs the Jepsen-style checkers on the committed outputs: the
// projection against the reference model (dup, nonmonotonic, lost, diff),
// the dead letters against the expected ones, and, on every output topic
// given, that no record of an aborted (or still open) transaction is visible
// to a read_committed reader.
func Check(ctx context.Context, brokers []string, projTopic, dlqTopic string, exp workload.Expect, txnTopics ...string) (Checked, error) {
	var c Checked
	proj, err := testkit.ReadAll(ctx, brokers, projTopic)
	if err != nil {
		return c, err
	}
	c.Projection = testkit.CheckProjection(proj, exp.Final)
	dl, err := testkit.ReadAll(ctx, brokers, dlqTopic)
	if err != nil {
		return c, err
	}
	c.DeadLetterProblem = testkit.CheckDeadLetters(testkit.DeadLetters(dl), exp.DeadLetterValues)
	for _, t := range append([]string{projTopic, dlqTopic}, txnTopics...) {
		r, err := CheckTransactions(ctx, brokers, t)
		if err != nil {
			return c, err
		}
		c.Txn.add(r)
	}
	return c, nil
}

// TxnReport is the outcome of CheckTransactions.
type TxnReport struct {
	Records          int // data records read read_uncommitted
	Committed        int // data records read read_committed
	AbortedRecords   int // data records of aborted transactions (present in the log)
	AbortMarkers     int // abort control records (one per partition an aborted transaction touched)
	CommitMarkers    int
	AbortedVisible   int // aborted records a read_committed reader saw: must be 0
	UndecidedVisible int // records of a still-open transaction a read_committed reader saw: must be 0
	MissingCommitted int // committed records a read_committed reader did not see: must be 0
	First            []string
}

func (r *TxnReport) add(o TxnReport) {
	r.Records += o.Records
	r.Committed += o.Committed
	r.AbortedRecords += o.AbortedRecords
	r.AbortMarkers += o.AbortMarkers
	r.CommitMarkers += o.CommitMarkers
	r.AbortedVisible += o.AbortedVisible
	r.UndecidedVisible += o.UndecidedVisible
	r.MissingCommitted += o.MissingCommitted
	if len(r.First) < 10 {
		r.First = append(r.First, o.First...)
	}
}

func (r TxnReport) String() string {
	return fmt.Sprintf("%d records (%d in %d aborted partition-transactions, %d commit markers), %d read committed; aborted-visible %d, undecided-visible %d, committed-missing %d %v",
		r.Records, r.AbortedRecords, r.AbortMarkers, r.CommitMarkers, r.Committed, r.AbortedVisible, r.UndecidedVisible, r.MissingCommitted, r.First)
}

type tpo struct {
	p int32
	o int64
}

// CheckTransactions reads topic twice – read_uncommitted with the control
// records, to classify every transactional record by the marker that ended
// its transaction, and read_committed, as a consumer of the outputs would –
// and counts aborted or undecided records the committed reader saw, and
// committed records it missed.
func CheckTransactions(ctx context.Context, brokers []string, topic string) (TxnReport, error) {
	var r TxnReport
	all, _, err := readAll(ctx, brokers, topic, false)
	if err != nil {
		return r, err
	}
	type pidKey struct {
		p   int32
		pid int64
	}
	pending := map[pidKey][]int64{}
	aborted := map[tpo]bool{}
	committed := map[tpo]bool{}
	for _, rec := range all {
		if rec.Attrs.IsControl() {
			k := pidKey{rec.Partition, rec.ProducerID}
			typ := int16(-1)
			if len(rec.Key) >= 4 {
				typ = int16(binary.BigEndian.Uint16(rec.Key[2:4]))
			}
			for _, o := range pending[k] {
				if typ == 0 {
					aborted[tpo{rec.Partition, o}] = true
				} else {
					committed[tpo{rec.Partition, o}] = true
				}
			}
			if typ == 0 {
				r.AbortMarkers++
				r.AbortedRecords += len(pending[k])
			} else {
				r.CommitMarkers++
			}
			delete(pending, k)
			continue
		}
		r.Records++
		if rec.Attrs.IsTransactional() {
			k := pidKey{rec.Partition, rec.ProducerID}
			pending[k] = append(pending[k], rec.Offset)
		} else {
			committed[tpo{rec.Partition, rec.Offset}] = true
		}
	}
	undecided := map[tpo]bool{}
	for k, offs := range pending {
		for _, o := range offs {
			undecided[tpo{k.p, o}] = true
		}
	}
	rc, lso, err := readAll(ctx, brokers, topic, true)
	if err != nil {
		return r, err
	}
	seen := map[tpo]bool{}
	for _, rec := range rc {
		if rec.Attrs.IsControl() {
			continue
		}
		r.Committed++
		at := tpo{rec.Partition, rec.Offset}
		seen[at] = true
		switch {
		case aborted[at]:
			r.AbortedVisible++
			if len(r.First) < 5 {
				r.First = append(r.First, fmt.Sprintf("%s/%d/%d: aborted record visible read_committed (key %q)", topic, at.p, at.o, rec.Key))
			}
		case undecided[at]:
			r.UndecidedVisible++
			if len(r.First) < 5 {
				r.First = append(r.First, fmt.Sprintf("%s/%d/%d: record of an open transaction visible read_committed", topic, at.p, at.o))
			}
		}
	}
	for at := range committed {
		if !seen[at] && at.o < lso[at.p] {
			r.MissingCommitted++
			if len(r.First) < 5 {
				r.First = append(r.First, fmt.Sprintf("%s/%d/%d: committed record not visible read_committed", topic, at.p, at.o))
			}
		}
	}
	return r, nil
}

// readAll reads every record of topic up to the end offsets at call time:
// read_committed up to the last stable offsets, read_uncommitted up to the
// high watermarks, through topicread. Control records are kept.
func readAll(ctx context.Context, brokers []string, topic string, committed bool) ([]*kgo.Record, map[int32]int64, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, nil, err
	}
	adm := kadm.NewClient(cl)
	var ends kadm.ListedOffsets
	if committed {
		ends, err = adm.ListCommittedOffsets(ctx, topic)
	} else {
		ends, err = adm.ListEndOffsets(ctx, topic)
	}
	cl.Close()
	if err != nil {
		return nil, nil, err
	}
	if err := ends.Error(); err != nil {
		return nil, nil, err
	}
	want, endAt := map[int32]topicread.Range{}, map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		endAt[o.Partition] = o.Offset
		if o.Offset > 0 {
			want[o.Partition] = topicread.Range{Start: topicread.FromStart, End: o.Offset}
		}
	})
	if len(want) == 0 {
		return nil, endAt, nil
	}
	var out []*kgo.Record
	err = topicread.Partitions(ctx, []kgo.Opt{kgo.SeedBrokers(brokers...)}, map[string]map[int32]topicread.Range{topic: want},
		topicread.Options{Uncommitted: !committed, Control: true}, func(r *kgo.Record) error {
			out = append(out, r)
			return nil
		})
	if ctx.Err() != nil {
		return nil, nil, fmt.Errorf("soak: read %s: %w", topic, ctx.Err())
	}
	if err != nil {
		return nil, nil, fmt.Errorf("soak: %w", err)
	}
	return out, endAt, nil
}
