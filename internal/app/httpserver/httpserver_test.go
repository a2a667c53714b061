package httpserver

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// start runs s on a loopback port and returns its base URL and a stop
// function that cancels Run and returns its error.
func start(t *testing.T, s *Server) (string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-s.Listening():
	case <-time.After(10 * time.Second):
		t.Fatal("server did not listen")
	}
	if s.Addr() == nil {
		cancel()
		t.Fatalf("not listening: %v", <-done)
	}
	stopped := false
	var runErr error
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			runErr = <-done
		}
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return "http://" + s.Addr().String(), stop
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "projector_test_total", Help: "Test."})
	reg.MustRegister(c)
	c.Add(3)
	var ready atomic.Bool
	base, stop := start(t, New("127.0.0.1:0", reg, func() (bool, string) { return ready.Load(), "joining consumer group g" }))

	if code, body := get(t, base+"/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != 503 || body != "not ready: joining consumer group g\n" {
		t.Errorf("/readyz before ready: %d %q", code, body)
	}
	ready.Store(true)
	if code, body := get(t, base+"/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("/readyz when ready: %d %q", code, body)
	}
	code, body := get(t, base+"/metrics")
	if code != 200 || !strings.Contains(body, "projector_test_total 3") {
		t.Errorf("/metrics: %d\n%s", code, body)
	}
	if code, _ := get(t, base+"/nope"); code != 404 {
		t.Errorf("/nope: %d", code)
	}
	// The scraped exposition parses back into the same value.
	if err := testutil.ScrapeAndCompare(base+"/metrics", strings.NewReader(`
# HELP projector_test_total Test.
# TYPE projector_test_total counter
projector_test_total 3
`), "projector_test_total"); err != nil {
		t.Error(err)
	}

	if err := stop(); err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("still serving after Run returned")
	}
}

func TestPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	err = New(addr, nil, nil).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "http.listen") {
		t.Fatalf("err = %v, want one naming %s and http.listen", err, addr)
	}
}

func TestOff(t *testing.T) {
	for _, l := range []string{"", Off} {
		s := New(l, nil, nil)
		if s.Enabled() {
			t.Errorf("%q: enabled", l)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := s.Run(ctx)
		cancel()
		if err != nil || s.Addr() != nil {
			t.Errorf("%q: Run = %v, Addr = %v", l, err, s.Addr())
		}
		select {
		case <-s.Listening():
		default:
			t.Errorf("%q: Listening not closed", l)
		}
	}
}

// A slow request in flight at shutdown completes; Run waits for it.
func TestGracefulShutdown(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{})
	g := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		close(entered)
		<-release
		return nil, nil
	})
	base, stop := start(t, New("127.0.0.1:0", g, nil))
	got := make(chan int, 1)
	go func() {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			got <- -1
			return
		}
		resp.Body.Close()
		got <- resp.StatusCode
	}()
	<-entered
	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	select {
	case err := <-stopped:
		t.Fatalf("Run returned with a request in flight: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if code := <-got; code != 200 {
		t.Errorf("in-flight request: %d", code)
	}
	if err := <-stopped; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v", err)
	}
}
