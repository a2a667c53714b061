package schemaregistry

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/projector-dev/projector/internal/harness/testkit"
)

func newRegistry(t *testing.T, opts ...srfake.Option) *srfake.Registry {
	t.Helper()
	reg := srfake.New(opts...)
	t.Cleanup(reg.Close)
	return reg
}

func newClient(t *testing.T, o Options) *Client {
	t.Helper()
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// frame prefixes data with the Confluent wire header, as sr does.
func frame(id int, index []int, data []byte) []byte {
	var h sr.ConfluentHeader
	b, _ := h.AppendEncode(nil, id, index)
	return append(b, data...)
}

const pointSchema = `{"type":"record","name":"Point","fields":[{"name":"x","type":"int"}]}`

func seedPoint(reg *srfake.Registry, id int) []byte {
	reg.SeedSchema("point-value", id, id, sr.Schema{Schema: pointSchema, Type: sr.TypeAvro})
	data, _ := avro.Marshal(avro.MustParse(pointSchema), map[string]any{"x": id})
	return frame(id, nil, data)
}

// countFetches counts the registry's schema-by-id requests.
func countFetches(reg *srfake.Registry) *atomic.Int64 {
	var n atomic.Int64
	reg.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
		if strings.HasPrefix(r.URL.Path, "/schemas/ids/") {
			n.Add(1)
		}
		return false
	})
	return &n
}

func TestJSONSchemaValueIsItsJSON(t *testing.T) {
	reg := newRegistry(t)
	reg.SeedSchema("j-value", 1, 3, sr.Schema{Schema: `{"type":"object"}`, Type: sr.TypeJSON})
	got, err := newClient(t, Options{URL: reg.URL()}).Decode(context.Background(), frame(3, nil, []byte(`{"a":1}`)), nil, 0)
	if err != nil || string(got) != `{"a":1}` {
		t.Fatalf("got %s, %v", got, err)
	}
}

// TestUnknownSchemaIDIsInvalid: the registry answers 404 with error code
// 40403; the value can never decode, and the error names the id.
func TestUnknownSchemaIDIsInvalid(t *testing.T) {
	reg := newRegistry(t)
	_, err := newClient(t, Options{URL: reg.URL()}).Decode(context.Background(), frame(4242, nil, []byte{0}), nil, 0)
	var ie *InvalidError
	if !errors.As(err, &ie) || ie.SchemaID != 4242 || errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want *InvalidError for 4242", err)
	}
	if want := "schemaregistry: schema id 4242: unknown to the registry (fetching the schema: 404, error code 40403)"; err.Error() != want {
		t.Errorf("message %q, want %q", err, want)
	}
}

// TestRegistryFailuresAreRetryable: every way the registry can fail that
// might go away is ErrUnavailable, never *InvalidError, so the record is
// held rather than dead-lettered.
func TestRegistryFailuresAreRetryable(t *testing.T) {
	status := func(code int, body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(code)
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	stopped := newRegistry(t)
	stoppedURL := stopped.URL()
	stopped.Close()
	unblock := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select { // answers only when the client gave up
		case <-r.Context().Done():
		case <-unblock:
		}
	}))
	t.Cleanup(func() { close(unblock); slow.Close() })
	authed := newRegistry(t, srfake.WithAuth("Bearer right"))
	seedPoint(authed, 1)

	cases := []struct {
		name string
		o    Options
	}{
		{"stopped", Options{URL: stoppedURL}},
		{"503", Options{URL: status(503, `{"error_code":50003,"message":"down"}`)}},
		{"500 without a body", Options{URL: status(500, "")}},
		{"429", Options{URL: status(429, "")}},
		{"404 without 40403 (a proxy, a wrong path)", Options{URL: status(404, "<html>not found</html>")}},
		{"nonsense body", Options{URL: status(200, "<html>")}},
		{"slow", Options{URL: slow.URL, Timeout: 50 * time.Millisecond}},
		{"401 no credentials", Options{URL: authed.URL()}},
		{"403 wrong credentials", Options{URL: authed.URL(), BearerToken: "wrong"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cl := newClient(t, c.o)
			_, err := cl.Decode(context.Background(), frame(1, nil, []byte{2}), nil, 0)
			var ie *InvalidError
			if !errors.Is(err, ErrUnavailable) || errors.As(err, &ie) {
				t.Fatalf("err = %v, want ErrUnavailable", err)
			}
			if !strings.Contains(err.Error(), "schema id 1") {
				t.Errorf("message %q does not name the schema id", err)
			}
			if n := cl.cache.len(); n != 0 {
				t.Errorf("an unavailable registry was cached (%d entries)", n)
			}
		})
	}
}

// TestOutageThenRecovery: a registry that is down gives ErrUnavailable;
// the same value decodes once it is back, and a cached schema keeps
// decoding while it is down.
func TestOutageThenRecovery(t *testing.T) {
	reg := srfake.NewRegistry()
	value := seedPoint(reg, 1)
	seedPoint(reg, 2)
	var down atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		reg.Handler().ServeHTTP(w, r)
	}))
	defer srv.Close()
	cl := newClient(t, Options{URL: srv.URL})
	ctx := context.Background()

	down.Store(true)
	if _, err := cl.Decode(ctx, value, nil, 0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("while down: %v, want ErrUnavailable", err)
	}
	down.Store(false)
	if got, err := cl.Decode(ctx, value, nil, 0); err != nil || string(got) != `{"x":1}` {
		t.Fatalf("after recovery: %s, %v", got, err)
	}
	down.Store(true)
	if got, err := cl.Decode(ctx, value, nil, 0); err != nil || string(got) != `{"x":1}` {
		t.Fatalf("cached while down: %s, %v", got, err)
	}
	if err := cl.Prefetch(ctx, 2); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("uncached id while down: %v, want ErrUnavailable", err)
	}
}

func TestCacheIsBoundedAndKeepsInvalidSchemas(t *testing.T) {
	reg := newRegistry(t)
	values := map[int][]byte{}
	for id := 1; id <= 3; id++ {
		values[id] = seedPoint(reg, id)
	}
	reg.SeedSchema("bad-value", 1, 9, sr.Schema{Schema: `{"type":"nonsense"}`, Type: sr.TypeAvro})
	fetches := countFetches(reg)
	cl := newClient(t, Options{URL: reg.URL(), CacheSize: 2})
	ctx := context.Background()
	decode := func(id int) {
		t.Helper()
		if _, err := cl.Decode(ctx, values[id], nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	decode(1)
	decode(2)
	decode(1) // cached
	if n := fetches.Load(); n != 2 {
		t.Fatalf("%d fetches for 2 ids, want 2", n)
	}
	decode(3) // evicts 2, the least recently used
	if n := cl.cache.len(); n != 2 {
		t.Fatalf("cache holds %d ids, want at most 2", n)
	}
	decode(1)
	if n := fetches.Load(); n != 3 {
		t.Fatalf("%d fetches, want 3: id 1 was used last and must still be cached", n)
	}
	decode(2)
	if n := fetches.Load(); n != 4 {
		t.Fatalf("%d fetches, want 4: id 2 must have been evicted", n)
	}
	for range 2 {
		if _, err := cl.Decode(ctx, frame(9, nil, []byte{0}), nil, 0); err == nil {
			t.Fatal("a schema that does not parse decoded")
		}
	}
	if n := fetches.Load(); n != 5 {
		t.Fatalf("%d fetches, want 5: a schema that does not parse is cached as invalid", n)
	}
}

// TestConcurrentMissesMakeOneFetch: callers that miss on an id while its
// fetch is in flight wait for it instead of fetching again.
func TestConcurrentMissesMakeOneFetch(t *testing.T) {
	reg := newRegistry(t)
	value := seedPoint(reg, 1)
	arrived, release := make(chan struct{}, 8), make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open) // before the registry's Close, which waits for held requests
	var fetches atomic.Int64
	reg.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
		if strings.HasPrefix(r.URL.Path, "/schemas/ids/") {
			fetches.Add(1)
			arrived <- struct{}{}
			<-release
		}
		return false
	})
	cl := newClient(t, Options{URL: reg.URL()})
	ctx := context.Background()
	const callers = 4
	errs := make(chan error, callers)
	decode := func() {
		_, err := cl.Decode(ctx, value, nil, 0)
		errs <- err
	}
	go decode()
	<-arrived // the first fetch is in flight, held
	for range callers - 1 {
		go decode()
	}
	if err := testkit.WaitFor(ctx, 10*time.Second, func() bool { return cl.cache.waiting() == callers-1 }); err != nil {
		t.Fatalf("the other callers did not wait for the fetch in flight (%d waiting, %d fetches): %v", cl.cache.waiting(), fetches.Load(), err)
	}
	open()
	for range callers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := fetches.Load(); n != 1 {
		t.Fatalf("%d fetches for %d concurrent callers, want 1", n, callers)
	}
}

func TestAuthentication(t *testing.T) {
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("key:secret"))
	for _, c := range []struct {
		auth string
		o    Options
	}{
		{basic, Options{Username: "key", Password: "secret"}},
		{"Bearer tok", Options{BearerToken: "tok"}},
	} {
		reg := newRegistry(t, srfake.WithAuth(c.auth))
		value := seedPoint(reg, 1)
		c.o.URL = reg.URL()
		if _, err := newClient(t, c.o).Decode(context.Background(), value, nil, 0); err != nil {
			t.Errorf("%s: %v", c.auth, err)
		}
	}
	if _, err := New(Options{URL: "http://r:8081", BearerToken: "t", Username: "u"}); err == nil {
		t.Error("basic auth and a bearer token together were accepted")
	}
}

// TestTLS: an https registry whose certificate the CA file vouches for is
// reached; without the CA file the certificate is unknown, which is
// retryable (an operator fixes the trust store; nothing is dead-lettered).
func TestTLS(t *testing.T) {
	reg := srfake.NewRegistry()
	value := seedPoint(reg, 1)
	srv := httptest.NewTLSServer(reg.Handler())
	defer srv.Close()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := newClient(t, Options{URL: srv.URL, TLS: &TLS{CAFile: caFile}}).Decode(ctx, value, nil, 0); err != nil {
		t.Fatalf("with the CA file: %v", err)
	}
	_, err := newClient(t, Options{URL: srv.URL}).Decode(ctx, value, nil, 0)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA file: %v, want ErrUnavailable naming the certificate", err)
	}
	if _, err := New(Options{URL: srv.URL, TLS: &TLS{CAFile: filepath.Join(t.TempDir(), "missing.pem")}}); err == nil {
		t.Error("a missing CA file was accepted")
	}
}

func TestOptionsRejected(t *testing.T) {
	for _, o := range []Options{{}, {URL: "registry:8081"}, {URL: "ftp://r"}, {URL: " , "}, {URL: "http://r", Password: "p"}} {
		if _, err := New(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if _, err := New(Options{URL: "http://a:8081, https://b:8081"}); err != nil {
		t.Errorf("two URLs: %v", err)
	}
}

func TestDecodedSizeIsBounded(t *testing.T) {
	reg := newRegistry(t)
	reg.SeedSchema("j-value", 1, 3, sr.Schema{Schema: `{"type":"object"}`, Type: sr.TypeJSON})
	_, err := newClient(t, Options{URL: reg.URL()}).Decode(context.Background(), frame(3, nil, []byte(`{"a":"0123456789"}`)), nil, 10)
	var ie *InvalidError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "more than 10 bytes") {
		t.Fatalf("err = %v", err)
	}
}
