package configs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/projector-dev/projector/configs"
	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/testtool"
)

// exposition maps each sample name of a text exposition (histograms appear
// as their _bucket, _sum and _count) to the label sets of its series.
type exposition map[string][]map[string]string

var (
	sampleLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+\S+`)
	labelPair  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)
)

func parseExposition(text string) exposition {
	e := exposition{}
	for _, line := range strings.Split(text, "\n") {
		m := sampleLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		labels := map[string]string{}
		for _, p := range labelPair.FindAllStringSubmatch(m[3], -1) {
			labels[p[1]] = p[2]
		}
		e[m[1]] = append(e[m[1]], labels)
	}
	return e
}

// missing returns, for each expression, the selectors that match no series
// of the exposition: a metric that does not exist, or a label value no
// series has (status="unkown").
func (e exposition) missing(exprs []string) []string {
	var problems []string
	for _, expr := range exprs {
		sels, err := selectors(expr)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		if len(sels) == 0 {
			problems = append(problems, fmt.Sprintf("%q queries no metric", expr))
		}
	next:
		for _, s := range sels {
			series, ok := e[s.name]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: no such metric in the worker's /metrics (in %q)", s.name, expr))
				continue
			}
			for _, labels := range series {
				match := true
				for k, v := range s.eq {
					match = match && labels[k] == v
				}
				if match {
					continue next
				}
			}
			problems = append(problems, fmt.Sprintf("%s: no series has these label values (in %q)", s, expr))
		}
	}
	return problems
}

// dashboardExprs returns every PromQL expression of a Grafana dashboard: the
// panels' targets and the selectors inside label_values(…) variables.
func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_]+\)$`)
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "query" || k == "definition") {
					if m := labelValues.FindStringSubmatch(s); m != nil {
						s = m[1]
					} else if k != "expr" {
						continue // a datasource variable's "prometheus"
					}
					out = append(out, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	return out
}

// alertRules is the part of a Prometheus rule file the tests read.
type alertRules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert string `yaml:"alert"`
			Expr  string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadAlerts(t *testing.T) alertRules {
	t.Helper()
	raw, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var r alertRules
	if err := yaml.Unmarshal(raw, &r); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	return r
}

// scrapeWorker runs a real worker (the demo configuration on the embedded
// broker, side effects configured, so both the processor and the executor
// run), waits until it is ready, and returns its /metrics.
func scrapeWorker(t *testing.T) string {
	t.Helper()
	cfg, err := config.Parse(configs.Demo, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg.State.Dir = filepath.Join(dir, "state")
	cfg.Kafka.EmbeddedBroker.Dir = filepath.Join(dir, "broker")
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTP.Listen = l.Addr().String()
	l.Close()
	a, err := wiring.New(cfg, wiring.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
		a.Close()
	})
	base := "http://" + cfg.HTTP.Listen
	testkit.Await(t, time.Minute, "the worker to be ready", func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	// Lag series appear once a refresh saw the assigned partitions (the
	// first refresh runs at start, maybe before the assignment): wait for
	// them rather than for a fixed time; the checks that follow say what
	// is missing if they never do.
	var body string
	_ = testkit.WaitFor(context.Background(), time.Minute, func() bool {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		body = string(b)
		return strings.Contains(body, "\nprojector_consumer_lag{")
	})
	return body
}

// TestQueriedMetricsExist checks that every metric the Grafana dashboard and
// the alert rules query exists in a live worker's exposition, with the
// label values they select, and that promtool accepts the exposition.
func TestQueriedMetricsExist(t *testing.T) {
	exp := parseExposition(scrapeWorker(t))
	t.Run("dashboard", func(t *testing.T) {
		exprs := dashboardExprs(t, "grafana-dashboard.json")
		if len(exprs) < 15 {
			t.Fatalf("found only %d expressions in the dashboard: the extractor is broken", len(exprs))
		}
		for _, p := range exp.missing(exprs) {
			t.Error(p)
		}
		// The panels the dashboard promises: each of these is queried.
		queried := map[string]bool{}
		for _, e := range exprs {
			sels, _ := selectors(e)
			for _, s := range sels {
				queried[s.name] = true
			}
		}
		for _, want := range []string{"projector_events_total", "projector_deadletter_total", "projector_gaps_open",
			"projector_gap_oldest_seconds", "projector_side_effects_total", "projector_side_effects_pending",
			"projector_transactions_total", "projector_transaction_seconds_bucket", "projector_consumer_lag",
			"projector_restore_records_total"} {
			if !queried[want] {
				t.Errorf("no dashboard panel queries %s", want)
			}
		}
	})
	t.Run("alerts", func(t *testing.T) {
		var exprs []string
		for _, g := range loadAlerts(t).Groups {
			for _, r := range g.Rules {
				exprs = append(exprs, r.Expr)
			}
		}
		if len(exprs) == 0 {
			t.Fatal("no alert expressions found")
		}
		for _, p := range exp.missing(exprs) {
			t.Error(p)
		}
	})
	// The same checker must reject what does not exist: a bogus metric, a
	// label value no series has, a histogram suffix on a counter.
	t.Run("checker rejects bogus queries", func(t *testing.T) {
		for _, bogus := range []string{
			`sum(rate(projector_no_such_metric_total[5m]))`,
			`sum by (effect) (increase(projector_side_effects_total{status="unkown"}[15m])) > 0`,
			`histogram_quantile(0.99, sum by (le) (rate(projector_events_total_bucket{job=~"$job"}[$__rate_interval])))`,
			`projector_ready and on (instance) projector_gaps_opened`,
		} {
			if p := exp.missing([]string{bogus}); len(p) != 1 {
				t.Errorf("%q: problems %q, want exactly one", bogus, p)
			}
		}
		// And accept the same shapes with real names.
		for _, good := range []string{
			`sum(rate(projector_events_total[5m]))`,
			`sum by (effect) (increase(projector_side_effects_total{status="unknown"}[15m])) > 0`,
			`histogram_quantile(0.99, sum by (le) (rate(projector_transaction_seconds_bucket{job=~"$job"}[$__rate_interval])))`,
			`projector_ready and on (instance) projector_gaps_open`,
		} {
			if p := exp.missing([]string{good}); len(p) != 0 {
				t.Errorf("%q: unexpected problems %q", good, p)
			}
		}
	})
}

// TestPromtoolCheckMetrics runs `promtool check metrics` (naming and help
// conventions) over a live worker's /metrics.
func TestPromtoolCheckMetrics(t *testing.T) {
	promtool := testtool.Require(t, "promtool", "prometheus")
	body := scrapeWorker(t)
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out)
	}
}
