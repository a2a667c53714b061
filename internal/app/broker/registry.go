package broker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/projector-dev/projector/internal/core/jsonenc"
)

// Registry is the embedded Schema Registry: franz-go's srfake (an in-memory
// Confluent-compatible REST API) on a TCP address, for development and the
// demo beside the embedded broker. srfake keeps schemas in memory only; a
// registry with a directory journals every change that succeeded and
// replays the journal at start, so that schema ids stay what the records in
// the broker's log were framed with (a forgotten id would make every such
// record an "unknown schema id" dead letter after a restart).
//
// Invariant: the journal holds the registry's successful changes in the
// order they were applied (changes are applied one at a time, under mu),
// so replaying it rebuilds the same subjects, versions and ids.
type Registry struct {
	fake    *srfake.Registry
	srv     *http.Server
	ln      net.Listener
	mu      sync.Mutex // serialises changes and their journal lines
	journal *os.File   // nil without a directory
	done    chan error
	closed  sync.Once
	cerr    error
}

// journalName is the file, in the registry's directory, that holds its
// changes, one JSON object per line.
const journalName = "schema-registry.jsonl"

// maxChangeBytes bounds a change request's body (a schema with its
// references); the Confluent registry's own default request limit is of the
// same order.
const maxChangeBytes = 16 << 20

// change is one journal line: a request that changed the registry.
type change struct {
	Method string          `json:"method"`
	Path   string          `json:"path"` // with the query
	Body   json.RawMessage `json:"body,omitempty"`
}

// StartRegistry serves an embedded registry on listen (host:port; port 0
// picks a free port). dir "" keeps it in memory only; otherwise the journal
// in dir is replayed first and appended to on every change.
func StartRegistry(listen, dir string) (*Registry, error) {
	r := &Registry{fake: srfake.NewRegistry(), done: make(chan error, 1)}
	if dir != "" {
		if err := r.openJournal(dir); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		r.closeJournal()
		return nil, fmt.Errorf("broker: schema registry: listen on %s: %w", listen, err)
	}
	r.ln = ln
	r.srv = &http.Server{Handler: http.HandlerFunc(r.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { r.done <- r.srv.Serve(ln) }()
	return r, nil
}

// URL is the registry's base URL, for schemaRegistry.url.
func (r *Registry) URL() string { return "http://" + r.ln.Addr().String() }

// Close stops serving and closes the journal; a second Close returns the
// first's error.
func (r *Registry) Close() error {
	r.closed.Do(func() { r.cerr = r.close() })
	return r.cerr
}

func (r *Registry) close() error {
	err := r.srv.Close()
	if serr := <-r.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if jerr := r.closeJournal(); err == nil {
		err = jerr
	}
	return err
}

func (r *Registry) closeJournal() error {
	if r.journal == nil {
		return nil
	}
	err := r.journal.Close()
	r.journal = nil
	return err
}

// serve answers reads directly and applies a change under mu, journaling
// it when it succeeded.
func (r *Registry) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method == http.MethodGet || req.Method == http.MethodHead {
		r.fake.Handler().ServeHTTP(w, req)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, maxChangeBytes))
	if err != nil {
		http.Error(w, fmt.Sprintf(`{"error_code":413,"message":"request body: %v"}`, err), http.StatusRequestEntityTooLarge)
		return
	}
	c := change{Method: req.Method, Path: req.URL.RequestURI()}
	if len(body) > 0 {
		if !json.Valid(body) {
			http.Error(w, `{"error_code":400,"message":"request body is not JSON"}`, http.StatusBadRequest)
			return
		}
		c.Body = body
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rec := r.apply(c)
	if rec.Code/100 == 2 && r.journal != nil {
		if err := r.append(c); err != nil {
			// The change is applied in memory but would be lost at a
			// restart: refuse it loudly rather than answer success.
			http.Error(w, fmt.Sprintf(`{"error_code":50001,"message":%q}`, err.Error()), http.StatusInternalServerError)
			return
		}
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

// apply runs one change through srfake's handler.
func (r *Registry) apply(c change) *httptest.ResponseRecorder {
	req := httptest.NewRequest(c.Method, c.Path, bytes.NewReader(c.Body))
	if len(c.Body) > 0 {
		req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	}
	rec := httptest.NewRecorder()
	r.fake.Handler().ServeHTTP(rec, req)
	return rec
}

func (r *Registry) append(c change) error {
	line, err := jsonenc.Marshal(c)
	if err != nil {
		return fmt.Errorf("broker: schema registry journal: %w", err)
	}
	if _, err := r.journal.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("broker: schema registry journal: %w", err)
	}
	if err := r.journal.Sync(); err != nil {
		return fmt.Errorf("broker: schema registry journal: %w", err)
	}
	return nil
}

// openJournal replays dir's journal into the registry and opens it for
// appending. A line that does not parse or no longer applies stops the
// start, naming the line: a registry that silently lost a schema would
// dead-letter the records framed with it. A last line without its newline
// was torn by a crash before its change was answered, so it is cut off.
func (r *Registry) openJournal(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("broker: schema registry: %w", err)
	}
	path := filepath.Join(dir, journalName)
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("broker: schema registry: %w", err)
	}
	whole := bytes.LastIndexByte(data, '\n') + 1
	for n, line := range bytes.Split(data[:whole], []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var c change
		if err := json.Unmarshal(line, &c); err != nil {
			return fmt.Errorf("broker: schema registry journal %s line %d: %w", path, n+1, err)
		}
		if rec := r.apply(c); rec.Code/100 != 2 {
			return fmt.Errorf("broker: schema registry journal %s line %d (%s %s): replay answered %d %s",
				path, n+1, c.Method, c.Path, rec.Code, bytes.TrimSpace(rec.Body.Bytes()))
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("broker: schema registry: %w", err)
	}
	if err := f.Truncate(int64(whole)); err != nil {
		f.Close()
		return fmt.Errorf("broker: schema registry journal %s: cut the torn last line: %w", path, err)
	}
	if _, err := f.Seek(int64(whole), io.SeekStart); err != nil {
		f.Close()
		return fmt.Errorf("broker: schema registry journal %s: %w", path, err)
	}
	r.journal = f
	return nil
}
