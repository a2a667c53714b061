package processor

import (
	"time"

	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/engine/guard"
)

// gapKey names one aggregate's gap in one projection.
type gapKey struct{ projection, aggregate string }

// gapSum is one projection's open gaps in one task: the count, kept as the
// index changes, and the oldest, recomputed only after the oldest gap
// closed or moved (stale).
type gapSum struct {
	open   int
	oldest time.Time
	stale  bool
}

func (ts *taskState) sum(projection string) *gapSum {
	s := ts.sums[projection]
	if s == nil {
		s = &gapSum{}
		ts.sums[projection] = s
	}
	return s
}

// setGap opens gap k, or moves it, with its held events waiting since since.
func (ts *taskState) setGap(k gapKey, since time.Time) {
	s := ts.sum(k.projection)
	if old, ok := ts.gaps[k]; ok {
		if time.UnixMilli(old).Equal(s.oldest) {
			s.stale = true
		}
	} else {
		s.open++
	}
	since = time.UnixMilli(since.UnixMilli())
	ts.gaps[k] = since.UnixMilli()
	if !s.stale && (s.oldest.IsZero() || since.Before(s.oldest)) {
		s.oldest = since
	}
}

// closeGap closes gap k, if it is open.
func (ts *taskState) closeGap(k gapKey) {
	old, ok := ts.gaps[k]
	if !ok {
		return
	}
	delete(ts.gaps, k)
	s := ts.sum(k.projection)
	s.open--
	if s.open == 0 {
		s.oldest, s.stale = time.Time{}, false
	} else if time.UnixMilli(old).Equal(s.oldest) {
		s.stale = true
	}
}

// summary returns projection's open gaps in the task, recomputing the
// oldest if it went stale (one walk of the task's index, only then).
func (ts *taskState) summary(projection string) (int, time.Time) {
	s := ts.sums[projection]
	if s == nil || s.open == 0 {
		return 0, time.Time{}
	}
	if s.stale {
		s.oldest, s.stale = time.Time{}, false
		for k, ms := range ts.gaps {
			if since := time.UnixMilli(ms); k.projection == projection && (s.oldest.IsZero() || since.Before(s.oldest)) {
				s.oldest = since
			}
		}
	}
	return s.open, s.oldest
}

// publishGaps summarises the tasks' gap indexes for metrics. It costs a look
// per task and projection, not a walk of every open gap (tens of thousands
// of held aggregates must not slow every commit down).
func (p *Processor) publishGaps() {
	g := make(map[string]GapSummary, len(p.cfg.Projections))
	for _, pr := range p.cfg.Projections {
		g[pr.Name] = GapSummary{}
	}
	p.loop.Tasks(func(ts *taskState) {
		for name := range ts.sums {
			n, oldest := ts.summary(name)
			if n == 0 {
				continue
			}
			s := g[name]
			s.Open += n
			if s.Oldest.IsZero() || oldest.Before(s.Oldest) {
				s.Oldest = oldest
			}
			g[name] = s
		}
	})
	p.stats.setGaps(g)
}

// trackGap records the aggregate's gap state for the task's gap index (b is
// the task's batch), applied once the transaction commits (batchState.committed).
func (ts *taskState) trackGap(b *eos.Batch, k gapKey, step guard.Step) {
	bs := ts.batchOf(b)
	c := gapChange{key: k}
	if step.HeldCount > 0 {
		c.since = step.HeldSince
	}
	bs.gaps = append(bs.gaps, c)
}
