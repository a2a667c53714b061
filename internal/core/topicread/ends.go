package topicread

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/projector-dev/projector/internal/core/acl"
)

// StableEnds lists where a read_committed read of topics ends: per partition
// with committed records, the Range from its log start offset to its last
// stable offset, both as listed now. A partition with nothing to read (no
// records, or all of them deleted) has no Range. The topics that do not exist
// are returned in missing, not as an error. opts must include the seed
// brokers (and TLS/SASL).
func StableEnds(ctx context.Context, opts []kgo.Opt, topics ...string) (ends map[string]map[int32]Range, missing []string, err error) {
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, nil, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, nil, fmt.Errorf("start offsets of %s: %w", strings.Join(topics, ", "), denied(err, topics...))
	}
	gone := map[string]bool{}
	// A topic the principal may not read fails here, on its start offsets:
	// said once, before its end offsets are asked for.
	if err := failed(starts, "start", gone); err != nil {
		return nil, nil, err
	}
	lsos, err := adm.ListCommittedOffsets(ctx, topics...)
	if err != nil {
		return nil, nil, fmt.Errorf("end offsets of %s: %w", strings.Join(topics, ", "), denied(err, topics...))
	}
	if err := failed(lsos, "end", gone); err != nil {
		return nil, nil, err
	}
	ends = map[string]map[int32]Range{}
	for _, tp := range topics {
		_, listedStart := starts[tp]
		_, listedEnd := lsos[tp]
		if gone[tp] || !listedStart || !listedEnd {
			missing = append(missing, tp)
			continue
		}
		ends[tp] = map[int32]Range{}
	}
	lsos.Each(func(o kadm.ListedOffset) {
		s, ok := starts.Lookup(o.Topic, o.Partition)
		if ends[o.Topic] == nil || !ok || o.Offset <= s.Offset {
			return
		}
		ends[o.Topic][o.Partition] = Range{Start: s.Offset, End: o.Offset}
	})
	return ends, missing, nil
}

// failed returns the errors of a listing's partitions, except that of a
// topic that does not exist: that one is noted in gone.
func failed(l kadm.ListedOffsets, which string, gone map[string]bool) error {
	var errs []error
	l.Each(func(o kadm.ListedOffset) {
		switch {
		case errors.Is(o.Err, kerr.UnknownTopicOrPartition):
			gone[o.Topic] = true
		case o.Err != nil:
			errs = append(errs, fmt.Errorf("%s offset of %s/%d: %w", which, o.Topic, o.Partition, denied(o.Err, o.Topic)))
		}
	})
	return errors.Join(errs...)
}

// Ends follows a read toward the ends of its ranges: which partitions have
// reached their End. It is how Partitions knows it is done, and how a reader
// that keeps tailing (the ingress's receipts view) knows it has caught up.
type Ends struct {
	ranges map[string]map[int32]Range
	done   map[string]map[int32]bool
	left   int
}

// NewEnds follows a read toward ranges' ends.
func NewEnds(ranges map[string]map[int32]Range) *Ends {
	e := &Ends{ranges: ranges, done: map[string]map[int32]bool{}}
	for _, ps := range ranges {
		e.left += len(ps)
	}
	return e
}

// Left is how many partitions have not reached their End yet.
func (e *Ends) Left() int { return e.left }

// See notes that the read got r (data record or marker) and reports whether
// r lies inside its partition's range, before an End not yet reached. The
// partition has reached its End once a record at End-1 or past it is seen.
func (e *Ends) See(r *kgo.Record) bool {
	rng, ok := e.ranges[r.Topic][r.Partition]
	if !ok || e.done[r.Topic][r.Partition] {
		return false
	}
	if r.Offset+1 >= rng.End {
		if e.done[r.Topic] == nil {
			e.done[r.Topic] = map[int32]bool{}
		}
		e.done[r.Topic][r.Partition] = true
		e.left--
	}
	return r.Offset < rng.End
}

// ClientOpts are the options of a client that reads committed records (or,
// with o.Uncommitted, all of them) toward Ends: a committed range ends with a
// transaction marker, and keeping the markers is what lets the read see that
// it reached the end.
func ClientOpts(o Options) []kgo.Opt {
	iso := kgo.ReadCommitted()
	if o.Uncommitted {
		iso = kgo.ReadUncommitted()
	}
	// No fetch sessions: franz-go's Client.Close (v1.22.2 and v1.22.3)
	// reads each source's session id without a lock while an in-flight
	// fetch's response may still write it (fetchSession.bumpEpoch); the
	// race detector caught it once in CI, a rebuild closing its offsets
	// reader while the live worker's output was arriving. A killed session
	// (what this option starts with) never writes the id. These clients
	// (ranges read to an end, the ingress's receipts tail) each read one
	// topic's few partitions: the incremental fetches a session saves are
	// nothing to them.
	return []kgo.Opt{kgo.FetchIsolationLevel(iso), kgo.KeepControlRecords(), kgo.DisableFetchSessions()}
}

// denied names what a refused read of topics needs: Read, which implies the
// Describe that listing offsets asks for (docs/operations.md#kafka-acls).
func denied(err error, topics ...string) error {
	needs := make([]acl.Need, 0, len(topics))
	for _, t := range topics {
		needs = append(needs, acl.Topic(t, kmsg.ACLOperationRead, "read it"))
	}
	return acl.Denied(err, needs...)
}
