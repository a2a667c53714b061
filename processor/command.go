package processor

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/core/command"
	"github.com/projector-dev/projector/internal/core/eos"
	"github.com/projector-dev/projector/internal/engine/guard"
	"github.com/projector-dev/projector/projection"
)

// HeaderCommand marks an input record that is an operator command, not an
// event (command.Header, shared with the executor's effects topic).
// Commands travel through the input topic (keyed by aggregate id, so they
// reach the partition that holds the aggregate) and are applied by that
// partition's owner inside its transaction, in order with the events.
const HeaderCommand = command.Header

// Command is an operator command on the input topic.
type Command struct {
	Op         string `json:"op"`                   // "skip-gap"
	Projection string `json:"projection,omitempty"` // empty: every projection
	Aggregate  string `json:"aggregate"`
	Note       string `json:"note,omitempty"`
}

// Valid reports whether c is a skip-gap command naming its aggregate
// (command.Decode).
func (c *Command) Valid() bool { return c.Op == "skip-gap" && c.Aggregate != "" }

// applyCommand applies an operator command: skip-gap applies the
// aggregate's held events past its gap (Guard.Expire under the skip
// policy), in every projection or the one named. A command that cannot
// apply is dead-lettered with the reason, so the operator sees why. The
// one error it returns is resolveGap's, a failure to read or write the
// task's own state (Pebble, or a stored record that does not decode):
// nothing in the command's value can make it.
func (p *Processor) applyCommand(b *eos.Batch, ts *taskState, r *kgo.Record) error {
	var c Command
	if err := command.Decode(r.Value, &c); err != nil {
		p.deadLetterRecord(b, ts, r, command.ReasonInvalidValue, err.Error())
		return nil
	}
	if c.Projection != "" && !slices.ContainsFunc(p.guards, func(g *guard.Guard) bool { return g.P.Name == c.Projection }) {
		p.deadLetterRecord(b, ts, r, command.ReasonInvalidValue,
			fmt.Sprintf("skip-gap: no projection %q", c.Projection))
		return nil
	}
	skipped := 0
	for _, g := range p.guards {
		if c.Projection != "" && g.P.Name != c.Projection {
			continue
		}
		step, dropped, err := p.resolveGap(b, ts, g, c.Aggregate, projection.Skip, 0) // updates the gap index when events were held
		if err != nil {
			return err // the store's: see above
		}
		skipped += len(step.Changes)
		if dropped != nil {
			skipped++
		}
		if len(step.Changes) > 0 {
			p.cfg.Logger.Info("gap skipped by operator", "projection", g.P.Name, "aggregate", c.Aggregate,
				"from", step.Changes[0].Version, "applied", len(step.Changes), "stillHeld", step.HeldCount, "note", c.Note)
		}
	}
	if skipped == 0 {
		p.deadLetterRecord(b, ts, r, command.ReasonInvalidValue,
			fmt.Sprintf("skip-gap: aggregate %q holds no events in %s", c.Aggregate, ts.task.ID))
	}
	return nil
}
