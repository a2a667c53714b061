package sideeffects

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/projector-dev/projector/sideeffects/effect"
)

// TestReportValue: an outcome report carries the attempt's texts with <, >
// and & as they are, cut as the ledger cuts them (a receiver's long answer
// cannot make the report too large to send), and decodes to the command the
// new owner settles.
func TestReportValue(t *testing.T) {
	a := effect.Attempt{Outcome: effect.OutcomeRetryable, StatusCode: 503, Duration: time.Second,
		Error: "sideeffects: webhook: 503 <html>Busy & " + strings.Repeat("<", 1<<20) + "</html>", Ref: "<r&f>"}
	next := t0.Add(time.Minute)
	v, err := reportValue(Command{Op: OpOutcome, As: effect.Pending.String(), Attempt: 3, Result: &a, Next: next})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(v), `\u00`) || !strings.Contains(string(v), `"error":"sideeffects: webhook: 503 <html>Busy & <<`) || !strings.Contains(string(v), `"ref":"<r&f>"`) {
		t.Errorf("report %.300s: want <, > and & literal", v)
	}
	if len(v) > 2*effect.MaxErrorBytes+512 {
		t.Errorf("the report is %d bytes: the error text was not cut to %d", len(v), effect.MaxErrorBytes)
	}
	var c Command
	if err := json.Unmarshal(v, &c); err != nil {
		t.Fatal(err)
	}
	if c.Op != OpOutcome || c.As != "pending" || c.Attempt != 3 || !c.Next.Equal(next) || c.Result == nil ||
		*c.Result != a.Bounded() || !strings.HasSuffix(c.Result.Error, "</html>") {
		t.Errorf("decoded %+v (result %+v), want the attempt as the ledger keeps it", c, c.Result)
	}
}
