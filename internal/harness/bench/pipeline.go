package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/dedup"
	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/projection"
)

// pipeline runs the real processor on the input until its group caught up.
func pipeline(ctx context.Context, o Options, brokers []string, input, name, stateDir string, want int64) (Phase, map[string]int64, error) {
	ph := Phase{Name: "pipeline"}
	written := new(writeCounter)
	defer os.RemoveAll(stateDir)
	st, err := processor.OpenStore(stateDir, 0)
	if err != nil {
		return ph, nil, err
	}
	defer st.Close()
	p, err := newProcessor(o, brokers, input, name, st, written)
	if err != nil {
		return ph, nil, err
	}
	var (
		mu  sync.Mutex
		lat []time.Duration
	)
	p.Stats().Observe(func(t processor.TxnObservation) {
		if t.Result == "committed" {
			mu.Lock()
			lat = append(lat, t.Duration)
			mu.Unlock()
		}
	})
	if err := runUntilCaughtUp(ctx, "pipeline", brokers, name, input, &ph, p.Run); err != nil {
		return ph, nil, err
	}
	s := p.Stats()
	got := make(map[string]int64, len(Outcomes))
	for _, oc := range processor.Outcomes {
		if slices.Contains(Outcomes, oc.String()) {
			got[oc.String()] = s.Outcome(oc)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	ph.Records = want // caught up: every input record was consumed in a committed transaction
	ph.Txns, ph.Aborted = int64(len(lat)), s.Transactions("aborted")
	ph.P50, ph.P99 = percentile(lat, 0.50), percentile(lat, 0.99)
	ph.Written = written.n.Load()
	return ph, got, nil
}

// newProcessor builds the processor as the pipeline phase runs it: group
// and transactional-id prefix name, live mode, one versioned projection
// (to projectionTopic(name)); hooks are its clients' kgo hooks.
func newProcessor(o Options, brokers []string, input, name string, st *processor.Store, hooks ...kgo.Hook) (*processor.Processor, error) {
	return processor.New(processor.Config{
		Session: processor.Session{
			Name: name, InstanceID: "bench", Brokers: brokers, DeadLetterTopic: name + ".dlq",
			Partitions: int32(o.Partitions), MaxRecordsPerTxn: o.Batch, Logger: o.Logger,
			ClientOpts: []kgo.Opt{kgo.WithHooks(hooks...)},
		},
		Store:  st,
		Inputs: []string{input}, EffectsTopic: name + ".effects",

		Projections: []*projection.Projection{{
			Name: "case-overview", Topic: projectionTopic(name), Handler: Rules(), Versioned: true,
			AggregateTypes: []string{"RegulatoryCase"},
		}},
		Dedup: dedup.NewStore(168 * time.Hour),
		Mode:  processor.Live,
	})
}

// projectionTopic is the projection topic of the processor named name.
func projectionTopic(name string) string { return name + ".case-overview" }

// Rules are the projection rules of the tests and the demo.
func Rules() projection.Rules {
	return projection.Rules{
		"CaseOpened": projection.Merge, "CaseUpdated": projection.Merge,
		"CaseEscalated": projection.Merge, "CaseClosed": projection.Delete,
	}
}

var errStopped = errors.New("stopped before catching up")

// runUntilCaughtUp runs run (a copy loop or the processor) until group has
// committed the end of every partition of input, timing it into ph (wall
// and CPU time), then stops it and waits for it to return. The error names
// the phase (what), and says "stopped" when run returned before catching up.
func runUntilCaughtUp(ctx context.Context, what string, brokers []string, group, input string, ph *Phase, run func(context.Context) error) error {
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	cpu0 := processCPU()
	start := time.Now()
	go func() { done <- run(runCtx) }()
	waitErr := waitCaughtUp(runCtx, brokers, group, input, done)
	ph.Elapsed = time.Since(start)
	ph.CPU = processCPU() - cpu0
	stop()
	switch {
	case errors.Is(waitErr, errStopped):
		return fmt.Errorf("bench: %s stopped: %w", what, errors.Unwrap(waitErr))
	case waitErr != nil:
		<-done
		return fmt.Errorf("bench: %s: %w", what, waitErr)
	}
	if err := <-done; err != nil {
		return fmt.Errorf("bench: %s: %w", what, err)
	}
	return nil
}

// waitCaughtUp polls until group has committed the end offset of every
// partition of topic, or the loop (done) returns first.
func waitCaughtUp(ctx context.Context, brokers []string, group, topic string, done <-chan error) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return err
	}
	if err := ends.Error(); err != nil {
		return err
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err == nil {
				err = errors.New("returned")
			}
			return fmt.Errorf("%w: %w", errStopped, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		committed, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			continue
		}
		behind := false
		ends.Each(func(e kadm.ListedOffset) {
			c, ok := committed.Lookup(e.Topic, e.Partition)
			if e.Offset > 0 && (!ok || c.At < e.Offset) {
				behind = true
			}
		})
		if !behind {
			return nil
		}
	}
}
