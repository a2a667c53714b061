package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/harness/testkit"
)

// IngressOptions configure the HTTP ingress load generator (`projector
// bench ingress`).
type IngressOptions struct {
	// Clients are the concurrency levels measured, in order.
	Clients []int
	// Requests per run and level; each is a new key and a new aggregate, so
	// every request is a first request answered 201 after its commit.
	Requests int
	// Runs per level and auth mode; the median throughput and p99 are
	// reported.
	Runs       int
	Partitions int
	// Auth are the ingress's door locks measured (AuthNone, AuthToken,
	// AuthJWT; default none). Each run starts the worker once per mode, in
	// turn, the order rotated by one every run, so that the modes share the
	// sitting's conditions.
	Auth []string
	// Dir holds the broker's log and the state (default: a temporary one).
	Dir    string
	Logger *slog.Logger
	// CPUProfile, when set, is the prefix of the CPU profiles written of
	// the measured runs of every auth mode but none (where the door lock's
	// cost shows): CPUProfile.<mode>-r<run>-c<clients>.
	CPUProfile string
}

// DefaultIngressOptions are the figures of docs/performance.md.
func DefaultIngressOptions() IngressOptions {
	return IngressOptions{Clients: []int{1, 16, 64}, Requests: 2000, Runs: 3, Partitions: 4, Auth: []string{AuthNone}}
}

// IngressRun is one run at one concurrency level.
type IngressRun struct {
	Auth     string
	Clients  int
	Requests int
	Elapsed  time.Duration
	P50, P99 time.Duration
	// CPU is the process's CPU time during the run: clients, ingress,
	// processor and broker together.
	CPU time.Duration
}

// CPUPerRequest is the process's CPU time per request: a cost that, unlike
// the throughput, does not fall when other work takes the machine's cores.
func (r IngressRun) CPUPerRequest() time.Duration { return r.CPU / time.Duration(r.Requests) }

// Rate is the requests answered 201 per second.
func (r IngressRun) Rate() float64 { return float64(r.Requests) / r.Elapsed.Seconds() }

// IngressResult holds every run.
type IngressResult struct {
	Options IngressOptions
	Runs    []IngressRun
}

// Level is the median throughput and the median p50 and p99 of the runs of
// one auth mode at one concurrency level.
func (r *IngressResult) Level(auth string, clients int) (rate float64, p50, p99 time.Duration) {
	var rates, p50s, p99s []float64
	for _, run := range r.Runs {
		if run.Clients == clients && run.Auth == auth {
			rates = append(rates, run.Rate())
			p50s = append(p50s, float64(run.P50))
			p99s = append(p99s, float64(run.P99))
		}
	}
	return median(rates), time.Duration(median(p50s)), time.Duration(median(p99s))
}

// CPUPerRequest is the median CPU time per request of the runs of one auth
// mode at one concurrency level.
func (r *IngressResult) CPUPerRequest(auth string, clients int) time.Duration {
	var cpu []float64
	for _, run := range r.Runs {
		if run.Clients == clients && run.Auth == auth {
			cpu = append(cpu, float64(run.CPUPerRequest()))
		}
	}
	return time.Duration(median(cpu))
}

// Print writes every run and the medians per level and mode, with each
// mode's throughput against none's when none was measured.
func (r *IngressResult) Print(w io.Writer) {
	o := r.Options
	fmt.Fprintf(w, "projector bench ingress: POST /v1/events, %d requests per run (each a new key, answered 201 after its commit), %d run(s) per level and auth mode;\n", o.Requests, o.Runs)
	fmt.Fprintf(w, "a kfake broker, the worker (processor + ingress, started anew per run and auth mode) and the clients in this process, %d partitions; auth: %s\n\n", o.Partitions, strings.Join(o.Auth, ", "))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "auth\tclients\trequests\ttime\treq/s\tp50\tp99\tCPU/req\t")
	for _, run := range r.Runs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%.0f\t%s\t%s\t%s\t\n", run.Auth, run.Clients, run.Requests, run.Elapsed.Round(time.Millisecond), run.Rate(),
			ms(run.P50), ms(run.P99), us(run.CPUPerRequest()))
	}
	tw.Flush()
	fmt.Fprintln(w, "\nmedian per level and auth mode:")
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "auth\tclients\treq/s\tvs none\tp50\tp99\tCPU/req\tvs none\t")
	for _, a := range o.Auth {
		for _, c := range o.Clients {
			rate, p50, p99 := r.Level(a, c)
			cpu := r.CPUPerRequest(a, c)
			vsRate, vsCPU := "", ""
			if base, _, _ := r.Level(AuthNone, c); a != AuthNone && base > 0 {
				vsRate = fmt.Sprintf("%+.1f%%", 100*(rate/base-1))
				vsCPU = fmt.Sprintf("%+.1f%%", 100*(float64(cpu)/float64(r.CPUPerRequest(AuthNone, c))-1))
			}
			fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t\n", a, c, rate, vsRate, ms(p50), ms(p99), us(cpu), vsCPU)
		}
	}
	tw.Flush()
}

const ingressBenchConfig = `name: bench-ingress
kafka:
  brokers: [%s]
  instanceId: bench-1
  input: [bench-events]
state: {dir: %q}
http: {listen: "off"}
ingress:
  listen: 127.0.0.1:0
  timeout: 30s
%sprojections:
  - name: bench
    topic: bench.v1
    events: {Opened: merge}
`

// Ingress runs the load generator: a broker in this process, then, per
// run and auth mode, a worker with its ingress and, per concurrency level,
// a warm-up and Requests POSTs spread over that many clients (keep-alive
// connections). Any answer but 201 with the outcome applied fails it.
func Ingress(ctx context.Context, o IngressOptions) (*IngressResult, error) {
	if len(o.Auth) == 0 {
		o.Auth = []string{AuthNone}
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	dir, b, stop, err := workBroker(o.Dir, "projector-bench-ingress-", o.Partitions)
	if err != nil {
		return nil, err
	}
	defer stop()
	if err := testkit.CreateTopic(ctx, []string{b.Addr()}, "bench-events", int32(o.Partitions)); err != nil {
		return nil, err
	}
	creds, err := newBenchCredentials(dir, slices.Max(o.Clients))
	if err != nil {
		return nil, err
	}
	res := &IngressResult{Options: o}
	for run := range o.Runs {
		// Each run starts one mode later: every mode is first, middle and
		// last equally often, so drift within a run (the store growing, the
		// machine's other work) does not favour one.
		k := run % len(o.Auth)
		order := append(slices.Clone(o.Auth[k:]), o.Auth[:k]...)
		for _, mode := range order {
			runs, err := ingressWorker(ctx, o, b.Addr(), filepath.Join(dir, "state"), creds, mode, run)
			if err != nil {
				return nil, err
			}
			res.Runs = append(res.Runs, runs...)
		}
	}
	return res, nil
}

// profile writes a CPU profile of one measured run of an auth mode other
// than none to o.CPUProfile + "." + name (go tool pprof merges several);
// stop ends it.
func (o IngressOptions) profile(mode, name string) (stop func(), err error) {
	if o.CPUProfile == "" || mode == AuthNone {
		return func() {}, nil
	}
	f, err := os.Create(o.CPUProfile + "." + name)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

func (o IngressOptions) validate() error {
	if len(o.Clients) == 0 || o.Requests <= 0 || o.Runs <= 0 || o.Partitions <= 0 || slices.Min(o.Clients) <= 0 {
		return errors.New("bench ingress: clients, requests, runs and partitions must be positive")
	}
	for _, a := range o.Auth {
		if !slices.Contains([]string{AuthNone, AuthToken, AuthJWT}, a) {
			return fmt.Errorf("bench ingress: auth %q: want %s, %s or %s", a, AuthNone, AuthToken, AuthJWT)
		}
	}
	return nil
}

// ingressWorker starts the worker with the ingress of one auth mode, runs
// every level once (after a warm-up) and stops it.
func ingressWorker(ctx context.Context, o IngressOptions, brokerAddr, stateDir string, creds *benchCredentials, mode string, run int) ([]IngressRun, error) {
	cfg, err := config.Parse([]byte(fmt.Sprintf(ingressBenchConfig, brokerAddr, stateDir, creds.section(mode))), nil)
	if err != nil {
		return nil, err
	}
	a, err := wiring.New(cfg, wiring.Options{Logger: o.Logger})
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
	authz := creds.header(mode)
	var out []IngressRun
	for _, c := range o.Clients {
		// A warm-up run per level: connections and the first transactions.
		if _, err := ingressRun(ctx, url, authz, fmt.Sprintf("warm-%s-%d-%d", mode, run, c), c, min(o.Requests, 4*c)); err != nil {
			return nil, err
		}
		name := fmt.Sprintf("%s-r%d-c%d", mode, run, c)
		stopProfile, err := o.profile(mode, name)
		if err != nil {
			return nil, err
		}
		r, err := ingressRun(ctx, url, authz, name, c, o.Requests)
		stopProfile()
		if err != nil {
			return nil, err
		}
		r.Auth = mode
		out = append(out, r)
	}
	return out, nil
}

// ingressRun sends n first requests (keys prefix-0 … prefix-(n-1)) over c
// clients and times each; client i sends authz(i) as its Authorization.
func ingressRun(ctx context.Context, url string, authz func(int) string, prefix string, c, n int) (IngressRun, error) {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: c, MaxConnsPerHost: c}, Timeout: time.Minute}
	defer hc.CloseIdleConnections()
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), processCPU()
	for client := range c {
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
				if h := authz(client); h != "" {
					req.Header.Set("Authorization", h)
				}
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
	cpu := processCPU() - cpu0
	if firstErr != nil {
		return IngressRun{}, firstErr
	}
	if err := ctx.Err(); err != nil {
		return IngressRun{}, err
	}
	return IngressRun{Clients: c, Requests: n, Elapsed: elapsed, P50: percentile(lat, 0.50), P99: percentile(lat, 0.99), CPU: cpu}, nil
}
