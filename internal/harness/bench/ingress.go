package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/runtime/app"
	"github.com/projector-dev/projector/internal/runtime/config"
)

// IngressOptions configure the HTTP ingress load generator (`projector
// bench ingress`).
type IngressOptions struct {
	// Clients are the concurrency levels measured, in order.
	Clients []int
	// Requests per run and level; each is a new key and a new aggregate, so
	// every request is a first request answered 201 after its commit.
	Requests int
	// Runs per level; the median throughput and p99 are reported.
	Runs       int
	Partitions int
	// Dir holds the broker's log and the state (default: a temporary one).
	Dir    string
	Logger *slog.Logger
}

// DefaultIngressOptions are the figures of docs/performance.md.
func DefaultIngressOptions() IngressOptions {
	return IngressOptions{Clients: []int{1, 16, 64}, Requests: 2000, Runs: 3, Partitions: 4}
}

// IngressRun is one run at one concurrency level.
type IngressRun struct {
	Clients  int
	Requests int
	Elapsed  time.Duration
	P50, P99 time.Duration
}

// Rate is the requests answered 201 per second.
func (r IngressRun) Rate() float64 { return float64(r.Requests) / r.Elapsed.Seconds() }

// IngressResult holds every run.
type IngressResult struct {
	Options IngressOptions
	Runs    []IngressRun
}

// Level is the median throughput and the median p50 and p99 of the runs at
// one concurrency level.
func (r *IngressResult) Level(clients int) (rate float64, p50, p99 time.Duration) {
	var rates, p50s, p99s []float64
	for _, run := range r.Runs {
		if run.Clients == clients {
			rates = append(rates, run.Rate())
			p50s = append(p50s, float64(run.P50))
			p99s = append(p99s, float64(run.P99))
		}
	}
	return median(rates), time.Duration(median(p50s)), time.Duration(median(p99s))
}

// Print writes every run and the medians per level.
func (r *IngressResult) Print(w io.Writer) {
	o := r.Options
	fmt.Fprintf(w, "projector bench ingress: POST /v1/events, %d requests per run (each a new key, answered 201 after its commit), %d run(s) per level;\n", o.Requests, o.Runs)
	fmt.Fprintf(w, "one worker (processor + ingress) and the clients in this process, embedded broker, %d partitions\n\n", o.Partitions)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clients\trun\trequests\ttime\treq/s\tp50\tp99\t")
	for i, run := range r.Runs {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%.0f\t%s\t%s\t\n", run.Clients, i%o.Runs+1, run.Requests, run.Elapsed.Round(time.Millisecond), run.Rate(), ms(run.P50), ms(run.P99))
	}
	tw.Flush()
	fmt.Fprintln(w, "\nmedian per level:")
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clients\treq/s\tp50\tp99\t")
	for _, c := range o.Clients {
		rate, p50, p99 := r.Level(c)
		fmt.Fprintf(tw, "%d\t%.0f\t%s\t%s\t\n", c, rate, ms(p50), ms(p99))
	}
	tw.Flush()
}

const ingressBenchConfig = `name: bench-ingress
kafka:
  brokers: embedded
  embeddedBroker: {listen: "127.0.0.1:0", partitions: %d}
  instanceId: bench-1
  input: [bench-events]
http: {listen: "off"}
ingress:
  listen: 127.0.0.1:0
  timeout: 30s
projections:
  - name: bench
    topic: bench.v1
    events: {Opened: merge}
`

// Ingress runs the load generator: a worker with its ingress on the embedded
// broker, then, per concurrency level and run, Requests POSTs spread over
// that many clients (keep-alive connections). Any answer but 201 with the
// outcome applied fails it.
func Ingress(ctx context.Context, o IngressOptions) (*IngressResult, error) {
	if len(o.Clients) == 0 || o.Requests <= 0 || o.Runs <= 0 || o.Partitions <= 0 {
		return nil, errors.New("bench ingress: clients, requests, runs and partitions must be positive")
	}
	dir, cleanup, err := workDir(o.Dir, "projector-bench-ingress-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	cfg, err := config.Parse([]byte(fmt.Sprintf(ingressBenchConfig, o.Partitions)), nil)
	if err != nil {
		return nil, err
	}
	cfg.State.Dir = filepath.Join(dir, "state")
	cfg.Kafka.EmbeddedBroker.Dir = filepath.Join(dir, "broker")
	a, err := app.New(cfg, app.Options{Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	defer a.Close()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	defer func() {
		stop()
		<-done
	}()
	if err := testkit.WaitFor(ctx, time.Minute, func() bool { ok, _ := a.Ready(); return ok }); err != nil {
		_, why := a.Ready()
		return nil, fmt.Errorf("bench ingress: worker not ready (%s): %w", why, err)
	}
	url := "http://" + a.Ingress.Addr().String() + "/v1/events"
	res := &IngressResult{Options: o}
	for _, c := range o.Clients {
		// A warm-up run per level: connections and the first transactions.
		if _, err := ingressRun(ctx, url, fmt.Sprintf("warm-%d", c), c, min(o.Requests, 4*c)); err != nil {
			return nil, err
		}
		for i := 0; i < o.Runs; i++ {
			run, err := ingressRun(ctx, url, fmt.Sprintf("c%d-r%d", c, i), c, o.Requests)
			if err != nil {
				return nil, err
			}
			res.Runs = append(res.Runs, run)
		}
	}
	return res, nil
}

// ingressRun sends n first requests (keys prefix-0 … prefix-(n-1)) over c
// clients and times each.
func ingressRun(ctx context.Context, url, prefix string, c, n int) (IngressRun, error) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c, MaxConnsPerHost: c}, Timeout: time.Minute}
	defer hc.CloseIdleConnections()
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for range c {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				key := fmt.Sprintf("%s-%d", prefix, i)
				body := fmt.Sprintf(`{"eventType":"Opened","aggregateId":%q,"aggregateVersion":1,"payload":{"n":%d}}`, key, i)
				req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(body))
				if err != nil {
					mu.Lock()
					firstErr = errors.Join(firstErr, err)
					mu.Unlock()
					return
				}
				req.Header.Set("Idempotency-Key", key)
				t0 := time.Now()
				resp, err := hc.Do(req)
				if err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusCreated || !strings.Contains(string(b), `"outcome":"applied"`) {
						err = fmt.Errorf("bench ingress: %s answered %d: %s (want 201, applied)", key, resp.StatusCode, b)
					}
				}
				lat[i] = time.Since(t0)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return IngressRun{}, firstErr
	}
	if err := ctx.Err(); err != nil {
		return IngressRun{}, err
	}
	return IngressRun{Clients: c, Requests: n, Elapsed: elapsed, P50: percentile(lat, 0.50), P99: percentile(lat, 0.99)}, nil
}
