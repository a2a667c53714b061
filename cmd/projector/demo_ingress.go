package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/core/receipt"
	"github.com/projector-dev/projector/internal/harness/testkit"
)

// demoIngress posts one event through the HTTP ingress, retries it
// re-serialised (replayed from the committed receipt) and then sends the
// same key with another payload (refused).
func demoIngress(ctx context.Context, stdout io.Writer, a *wiring.App) error {
	if err := testkit.WaitFor(ctx, 30*time.Second, func() bool { ok, _ := a.Ingress.Ready(); return ok }); err != nil {
		return fmt.Errorf("waiting for the ingress: %w", err)
	}
	url := "http://" + a.Ingress.Addr().String() + "/v1/events"
	send := func(body string) (int, string, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
		if err != nil {
			return 0, "", nil, err
		}
		req.Header.Set("Idempotency-Key", "order-7")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, "", nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), b, err
	}
	first := `{"eventType":"CaseOpened","aggregateId":"CASE-7","aggregateType":"RegulatoryCase","aggregateVersion":1,"payload":{"status":"OPEN","amount":120}}`
	retry := `{ "payload": {"amount": 120.0, "status": "OPEN"}, "aggregateVersion": 1, "aggregateType": "RegulatoryCase", "aggregateId": "CASE-7", "eventType": "CaseOpened" }`
	changed := strings.Replace(first, "120", "999", 1)
	c1, _, b1, err := send(first)
	if err != nil {
		return err
	}
	c2, replayed, b2, err := send(retry)
	if err != nil {
		return err
	}
	c3, _, _, err := send(changed)
	if err != nil {
		return err
	}
	// "No new event": the input topic holds one record from the ingress.
	recs, err := testkit.ReadAll(ctx, a.Brokers, a.Config.Kafka.Input[0].Topic)
	if err != nil {
		return err
	}
	written := 0
	for _, rec := range recs {
		for _, h := range rec.Headers {
			if h.Key == receipt.Header {
				written++
			}
		}
	}
	var r struct{ EventID, Outcome string }
	_ = json.Unmarshal(b1, &r)
	same := "same body"
	if !bytes.Equal(b1, b2) {
		same = "DIFFERENT body"
	}
	fmt.Fprintf(stdout, "\n   HTTP ingress (POST /v1/events, Idempotency-Key: order-7):\n")
	fmt.Fprintf(stdout, "   first request      %d  %s as %s\n", c1, r.Outcome, r.EventID)
	fmt.Fprintf(stdout, "   retry, reordered   %d  replayed=%s, %s, %d event(s) written in all\n", c2, replayed, same, written)
	fmt.Fprintf(stdout, "   changed payload    %d  refused\n", c3)
	if c1 != http.StatusCreated || c2 != http.StatusOK || replayed != "true" || !bytes.Equal(b1, b2) || c3 != http.StatusConflict || written != 1 {
		return fmt.Errorf("demo: the ingress answered %d, %d (replayed %q), %d and wrote %d events; want 201, 200 (replayed, same body), 409 and 1", c1, c2, replayed, c3, written)
	}
	return nil
}
