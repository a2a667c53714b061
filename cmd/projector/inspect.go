package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/operator/ops"
)

// runInspect is `projector inspect AGGREGATE`: the guard version, state and
// held events of one aggregate, per projection, from the committed changelog.
func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("inspect", "  projector inspect CASE-4 --config configs/example.yaml\n  projector inspect CASE-4 --config configs/example.yaml --projection case-overview --json").withConfig(true)
	proj := fs.String("projection", "", "only this projection (default: all)")
	asJSON := fs.Bool("json", false, "print JSON (one object per projection and partition)")
	timeout := fs.Duration("timeout", time.Minute, "give up reading the changelogs after this long")
	agg, s, err := fs.aggregateSession(args, stdout, stderr, proj, "inspect: want the aggregate id: projector inspect AGGREGATE --config FILE")
	if err != nil {
		return err
	}
	defer s.close()
	st, err := s.read(ctx, *timeout, ops.Query{Projection: *proj, Aggregate: agg, States: true})
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, a := range st.Aggregates {
			if err := enc.Encode(gapJSON{a, a.Missing()}); err != nil {
				return err
			}
		}
	} else {
		printInspect(stdout, st, s.cfg.Projections, *proj, agg)
	}
	if len(st.Aggregates) == 0 {
		return fmt.Errorf("inspect: %s has no state in %s%s (%d changelog records read): no event of it was applied or held",
			agg, s.cfg.Name, forProjection(*proj), st.Records)
	}
	return nil
}

func printInspect(w io.Writer, st *ops.State, projs []config.Projection, only, agg string) {
	now := time.Now()
	byProj := map[string][]*ops.Aggregate{}
	for _, a := range st.Aggregates {
		byProj[a.Projection] = append(byProj[a.Projection], a)
	}
	first := true
	for _, p := range projs {
		if only != "" && p.Name != only {
			continue
		}
		if !first {
			fmt.Fprintln(w)
		}
		first = false
		as := byProj[p.Name]
		if len(as) == 0 {
			fmt.Fprintf(w, "%s / %s: no state (no event of it applied or held)\n", p.Name, agg)
			continue
		}
		for _, a := range as {
			fmt.Fprintf(w, "%s / %s  (partition %s)\n", a.Projection, a.Aggregate, a.Task())
			if !a.Found {
				fmt.Fprintf(w, "  version    0 (nothing applied yet)\n")
			} else {
				fmt.Fprintf(w, "  version    %d\n", a.Version)
				fmt.Fprintf(w, "  deleted    %v\n", a.Deleted)
			}
			state := "{}"
			switch {
			case a.Deleted:
				state = "(none: deleted; the guard remembers the version)"
			case len(a.State) > 0:
				state = string(a.State)
			}
			fmt.Fprintf(w, "  state      %s\n", state)
			if len(a.Held) == 0 {
				fmt.Fprintf(w, "  held       none\n")
				continue
			}
			since := ""
			if !a.HeldSince.IsZero() {
				since = fmt.Sprintf(", gap open since %s (%s ago)", a.HeldSince.UTC().Format(time.RFC3339), now.Sub(a.HeldSince).Round(time.Second))
			}
			fmt.Fprintf(w, "  held       %d event(s), missing version(s) %s%s\n", len(a.Held), strings.Join(a.Missing(), ","), since)
			tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "    VERSION\tEVENT ID\tEVENT TYPE\tHELD SINCE\tINPUT OFFSET")
			for _, h := range a.Held {
				fmt.Fprintf(tw, "    %d\t%s\t%s\t%s\t%d\n", h.Version, h.EventID, h.EventType, h.Since.UTC().Format(time.RFC3339), h.Offset)
			}
			tw.Flush()
		}
	}
}
