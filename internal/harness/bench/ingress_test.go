package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestIngressBenchSmall runs the ingress load generator at a small size, so
// that it cannot rot: every request is answered 201 with outcome applied
// (Ingress fails otherwise), and the report has a row per level.
func TestIngressBenchSmall(t *testing.T) {
	o := IngressOptions{Clients: []int{1, 4}, Requests: 40, Runs: 2, Partitions: 2, Auth: []string{AuthNone, AuthToken, AuthJWT}}
	res, err := Ingress(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 12 {
		t.Fatalf("%d runs, want 12 (2 levels, 2 runs, 3 auth modes)", len(res.Runs))
	}
	for _, r := range res.Runs {
		if r.Requests != 40 || r.Rate() <= 0 || r.P50 <= 0 || r.P99 < r.P50 {
			t.Fatalf("run %+v", r)
		}
	}
	for _, a := range o.Auth {
		for _, c := range o.Clients {
			if rate, p50, p99 := res.Level(a, c); rate <= 0 || p50 <= 0 || p99 < p50 {
				t.Fatalf("%s, level %d: %.0f req/s, p50 %s, p99 %s", a, c, rate, p50, p99)
			}
		}
	}
	var out bytes.Buffer
	res.Print(&out)
	if !strings.Contains(out.String(), "median per level") || !strings.Contains(out.String(), "vs none") || strings.Count(out.String(), "\n") < 20 {
		t.Fatalf("report:\n%s", out.String())
	}
	t.Log("\n" + out.String())
}
