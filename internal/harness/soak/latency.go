package soak

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// pollEvery is how often the soak reads the groups' committed offsets while
// it waits for a life's first commit: the resolution of the restart latency.
const pollEvery = 20 * time.Millisecond

// offsets reads the committed offsets of the processor's and the executor's
// consumer groups, black-box, through the broker.
type offsets struct {
	cl  *kgo.Client
	adm *kadm.Client
}

func newOffsets(brokers []string) (*offsets, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	return &offsets{cl: cl, adm: kadm.NewClient(cl)}, nil
}

func (o *offsets) close() { o.cl.Close() }

// commits is one reading: the committed offsets of each group, summed over
// its partitions (committed offsets only move forward, so a larger sum is a
// later commit).
type commits struct {
	proc, exec int64
}

func (o *offsets) read(ctx context.Context) (commits, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var c commits
	for _, r := range o.adm.FetchManyOffsets(ctx, Name, ExecutorGroup) {
		if errors.Is(r.Err, kerr.GroupIDNotFound) {
			continue // nothing committed yet
		}
		if r.Err != nil {
			return c, fmt.Errorf("soak: committed offsets of %s: %w", r.Group, r.Err)
		}
		var n int64
		r.Fetched.Each(func(or kadm.OffsetResponse) {
			if or.Err == nil && or.At > 0 {
				n += or.At
			}
		})
		switch r.Group {
		case Name:
			c.proc = n
		case ExecutorGroup:
			c.exec = n
		}
	}
	return c, nil
}

// readRetry reads until it succeeds (the broker may be restarting).
func (o *offsets) readRetry(ctx context.Context, within time.Duration) (commits, error) {
	deadline := time.Now().Add(within)
	for {
		c, err := o.read(ctx)
		if err == nil || time.Now().After(deadline) {
			return c, err
		}
		select {
		case <-ctx.Done():
			return c, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// moved is when a life's first commit was seen, and by which group.
type moved struct {
	by string // "processor", "executor", "both"; "" when the worker exited first
	at time.Time
}

// waitMoved polls the committed offsets every pollEvery until either group's
// moved past base: the worker committed a transaction. The time is that of
// the reading that saw it, so it errs late by at most one poll.
func (o *offsets) waitMoved(ctx context.Context, base commits, w *worker, within time.Duration) (moved, error) {
	deadline := time.Now().Add(within)
	for {
		if w.hasExited() {
			return moved{}, nil
		}
		c, err := o.read(ctx)
		at := time.Now()
		if err == nil {
			p, e := c.proc > base.proc, c.exec > base.exec
			switch {
			case p && e:
				return moved{"both", at}, nil
			case p:
				return moved{"processor", at}, nil
			case e:
				return moved{"executor", at}, nil
			}
		}
		if at.After(deadline) {
			return moved{}, fmt.Errorf("no transaction committed within %s of the start (committed offsets: processor %d, executor %d; last read error %v)",
				within, base.proc, base.exec, err)
		}
		select {
		case <-ctx.Done():
			return moved{}, ctx.Err()
		case <-time.After(pollEvery):
		}
	}
}

// pending is the input the processor group has not committed yet (end
// offsets minus committed offsets, over all partitions).
func (o *offsets) pending(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ends, err := o.adm.ListEndOffsets(ctx, InputTopic)
	if err != nil {
		return 0, err
	}
	committed, err := o.adm.FetchOffsets(ctx, Name)
	if err != nil {
		return 0, err
	}
	var n int64
	var perr error
	ends.Each(func(e kadm.ListedOffset) {
		if e.Err != nil {
			perr = e.Err
			return
		}
		at := int64(0)
		if c, ok := committed.Lookup(e.Topic, e.Partition); ok && c.At > 0 {
			at = c.At
		}
		n += max(e.Offset-at, 0)
	})
	return n, perr
}

// waitPending polls until the processor group has input it has not
// committed (records produced but not yet processed, or processed in a
// transaction not yet committed), or within has passed, or the worker
// exited; it returns the last reading (0 on error).
func (o *offsets) waitPending(ctx context.Context, w *worker, within time.Duration) int64 {
	deadline := time.Now().Add(within)
	for {
		p, err := o.pending(ctx)
		if err != nil {
			p = 0
		}
		if p > 0 || w.hasExited() || ctx.Err() != nil || time.Now().After(deadline) {
			return p
		}
		if err != nil {
			time.Sleep(20 * time.Millisecond) // sleep ok: poll pause; the broker is away: do not spin
		}
	}
}

// Restart is one life after a SIGKILL: how long from its process start
// (cmd.Start) to its first committed transaction, seen as the committed
// offsets of the processor's or the executor's group moving past where they
// were at the kill.
type Restart struct {
	Life        int
	FirstCommit time.Duration
	By          string // the group whose offsets moved first: "processor", "executor" or "both"
}

// Kill is one SIGKILL.
type Kill struct {
	Life  int
	Lived time.Duration // from the life's first commit to the kill
	// Moving: the processor group's committed offsets advanced after the
	// life's first commit (the one the soak waits for) and before the kill.
	Moving bool
	// Pending is the input produced and not committed by the processor at
	// the moment of the kill (the soak strikes at the first such moment
	// after the life's random time, waiting at most a second).
	Pending int64
}

// Dist summarises durations: nearest-rank percentiles.
type Dist struct {
	N                     int
	Min, Median, P99, Max time.Duration
	Over                  int             // samples above Bound
	Bound                 time.Duration   // 0: none
	Samples               []time.Duration // in the order taken
}

// Summarise returns the distribution of ds; over counts samples above bound
// (bound 0: none).
func Summarise(ds []time.Duration, bound time.Duration) Dist {
	d := Dist{N: len(ds), Bound: bound, Samples: slices.Clone(ds)}
	if len(ds) == 0 {
		return d
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration { return s[max(int(math.Ceil(p*float64(len(s))))-1, 0)] }
	d.Min, d.Median, d.P99, d.Max = s[0], rank(0.5), rank(0.99), s[len(s)-1]
	if bound > 0 {
		for _, x := range s {
			if x > bound {
				d.Over++
			}
		}
	}
	return d
}

func (d Dist) String() string {
	if d.N == 0 {
		return "no samples"
	}
	r := func(x time.Duration) string { return x.Round(time.Millisecond).String() }
	s := fmt.Sprintf("n %d, min %s, median %s, p99 %s, max %s", d.N, r(d.Min), r(d.Median), r(d.P99), r(d.Max))
	if d.Bound > 0 {
		s += fmt.Sprintf(", %d over %s", d.Over, d.Bound)
	}
	return s
}

// SamplesString lists the samples in the order they were taken.
func (d Dist) SamplesString() string {
	var b strings.Builder
	for i, x := range d.Samples {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(x.Round(time.Millisecond).String())
	}
	return b.String()
}
