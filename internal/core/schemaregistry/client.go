// Package schemaregistry decodes record values framed for a
// Confluent-compatible Schema Registry into JSON, fetching each schema once
// by id and keeping it in a bounded cache.
//
// The wire format (sr.ConfluentHeader): magic byte 0, the schema id as 4
// big-endian bytes, for Protobuf the message indexes, then the encoded data.
// Avro data is decoded by walking the schema (parsed by hamba/avro),
// Protobuf data with a dynamicpb message of the schema compiled by
// protocompile (references included) and written by protojson, JSON Schema
// data is JSON already. The JSON each produces is described in avro.go and
// protobuf.go; it is what a JSON producer of the same event would write, so
// an Avro copy and a JSON copy of an event fingerprint the same
// (docs/design.md#duplicates-absorbed).
//
// Invariants:
//
//   - Failures are split by whether the value could ever decode
//     (docs/design.md#nothing-dropped-silently). An *InvalidError (an unknown
//     schema id, which the registry answers 404 with error code 40403; a
//     schema that does not parse; data that does not fit its schema) can
//     never go away: the caller dead-letters invalid:value. Everything else —
//     the registry down, slow (Options.Timeout), answering 5xx, 401/403, any
//     other status, or nonsense — wraps ErrUnavailable: the caller holds the
//     partition and retries, and never dead-letters such a value.
//   - Schemas are immutable per id, so a cached schema (or a cached
//     *InvalidError for a schema that does not parse) is never refetched; an
//     unavailable registry is never cached. The cache holds at most
//     Options.CacheSize ids, least recently used out first; concurrent
//     misses on one id make one fetch.
//   - Decoding is bounded: the JSON is at most the caller's maxBytes, no
//     container nests deeper than 64 levels (the envelope's limit), and no
//     length read from the data is trusted beyond the bytes present.
//   - The Client is safe for concurrent use.
package schemaregistry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
)

// ErrUnavailable is wrapped by every error after which the value might
// still decode: retry later.
var ErrUnavailable = errors.New("schemaregistry: registry unavailable")

// InvalidError is a value that can never decode: its schema id is unknown
// to the registry, its schema does not parse, or its data does not fit it.
type InvalidError struct {
	SchemaID int
	Msg      string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("schemaregistry: schema id %d: %s", e.SchemaID, e.Msg)
}

// Defaults.
const (
	DefaultTimeout   = 5 * time.Second
	DefaultCacheSize = 1000
)

// Options configure the registry client. They are plain values: the
// configuration package maps its YAML onto them.
type Options struct {
	// URL of the registry; a comma-separated list is tried in order.
	URL string
	// Username and Password: HTTP basic authentication (Confluent Cloud: the
	// API key and secret). Not together with BearerToken.
	Username, Password string
	// BearerToken is sent as "Authorization: Bearer <token>".
	BearerToken string
	// TLS for https URLs; nil: the system roots.
	TLS *TLS
	// Timeout bounds each request; a registry slower than this is
	// unavailable. Default 5s.
	Timeout time.Duration
	// CacheSize is the number of schema ids kept; default 1000.
	CacheSize int
}

// TLS configures TLS to the registry. Relative file paths are relative to
// the working directory.
type TLS struct {
	CAFile             string // default: the system roots
	CertFile, KeyFile  string // a client certificate
	ServerName         string
	InsecureSkipVerify bool
}

// Client fetches, caches and applies schemas.
type Client struct {
	sr    *sr.Client
	cache *cache
}

// New returns a client for the registry o names. It does not contact the
// registry.
func New(o Options) (*Client, error) {
	urls, err := parseURLs(o.URL)
	if err != nil {
		return nil, err
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.CacheSize <= 0 {
		o.CacheSize = DefaultCacheSize
	}
	opts := []sr.ClientOpt{sr.URLs(urls...), sr.HTTPClient(&http.Client{Timeout: o.Timeout}), sr.UserAgent("projector")}
	switch {
	case o.BearerToken != "" && (o.Username != "" || o.Password != ""):
		return nil, errors.New("schemaregistry: basic auth and a bearer token are mutually exclusive")
	case o.BearerToken != "":
		opts = append(opts, sr.BearerToken(o.BearerToken))
	case o.Username != "" || o.Password != "":
		if o.Username == "" {
			return nil, errors.New("schemaregistry: a password needs a username")
		}
		opts = append(opts, sr.BasicAuth(o.Username, o.Password))
	}
	if o.TLS != nil {
		tc, err := tlsConfig(o.TLS)
		if err != nil {
			return nil, err
		}
		opts = append(opts, sr.DialTLSConfig(tc))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("schemaregistry: %w", err)
	}
	return &Client{sr: cl, cache: newCache(o.CacheSize)}, nil
}

func parseURLs(s string) ([]string, error) {
	var urls []string
	for _, u := range strings.Split(s, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			return nil, fmt.Errorf("schemaregistry: url %q: want http://host:port or https://host:port", u)
		}
		urls = append(urls, u)
	}
	if len(urls) == 0 {
		return nil, errors.New("schemaregistry: no url")
	}
	return urls, nil
}

func tlsConfig(t *TLS) (*tls.Config, error) {
	tc := &tls.Config{ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("schemaregistry: tls ca file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("schemaregistry: tls ca file: no PEM certificates in %s", t.CAFile)
		}
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("schemaregistry: tls client certificate: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// header is the Confluent wire header's reader.
var header sr.ConfluentHeader

// Decode appends the JSON form of the framed value to dst. The JSON may be
// at most maxBytes long (<= 0: 1 MiB). Errors: *InvalidError, or an error
// wrapping ErrUnavailable.
func (c *Client) Decode(ctx context.Context, framed, dst []byte, maxBytes int) ([]byte, error) {
	id, data, err := header.DecodeID(framed)
	if err != nil {
		return nil, &InvalidError{Msg: "not framed for a schema registry: " + err.Error()}
	}
	s, err := c.schema(ctx, id)
	if err != nil {
		return nil, err
	}
	if maxBytes <= 0 {
		maxBytes = 1 << 20
	}
	out, msg := s.decode(data, dst, len(dst)+maxBytes)
	if msg != "" {
		return nil, &InvalidError{SchemaID: id, Msg: s.kind() + " value does not decode: " + msg}
	}
	return out, nil
}

// Prefetch makes sure the schema with this id is cached. Errors as Decode's.
func (c *Client) Prefetch(ctx context.Context, id int) error {
	_, err := c.schema(ctx, id)
	return err
}

// schema returns the decoder for id, from the cache or fetched.
func (c *Client) schema(ctx context.Context, id int) (decoder, error) {
	return c.cache.get(ctx, id, c.load)
}

// decoder turns one schema's data into JSON, appending to dst; msg says why
// not. The out slice may be at most limit long.
type decoder interface {
	decode(data, dst []byte, limit int) (out []byte, msg string)
	kind() string
}

// load fetches schema id and compiles it. An error is *InvalidError or
// wraps ErrUnavailable. The schema text is another system's: a parser that
// panics on it makes the schema invalid rather than stopping the worker.
func (c *Client) load(ctx context.Context, id int) (_ decoder, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &InvalidError{SchemaID: id, Msg: fmt.Sprintf("compiling the schema panicked: %v", r)}
		}
	}()
	s, err := c.sr.SchemaByID(ctx, id)
	if err != nil {
		return nil, classify(id, "fetching the schema", err)
	}
	switch s.Type {
	case sr.TypeAvro:
		return c.compileAvro(ctx, id, s)
	case sr.TypeProtobuf:
		return c.compileProtobuf(ctx, id, s)
	case sr.TypeJSON:
		return jsonSchema{}, nil
	}
	return nil, &InvalidError{SchemaID: id, Msg: "unsupported schema type " + s.Type.String()}
}

// classify splits a registry error: "not found" answers (40401 subject,
// 40402 version, 40403 schema) mean the value can never decode; anything
// else — a transport error, a timeout, a 5xx, 401/403, a 404 without one
// of those codes (a proxy's, a wrong URL path) — might go away.
func classify(id int, what string, err error) error {
	var re *sr.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
		switch re.ErrorCode {
		case sr.ErrSchemaNotFound.Code:
			return &InvalidError{SchemaID: id, Msg: "unknown to the registry (" + what + ": 404, error code 40403)"}
		case sr.ErrSubjectNotFound.Code, sr.ErrVersionNotFound.Code:
			return &InvalidError{SchemaID: id, Msg: fmt.Sprintf("%s: 404, error code %d: %s", what, re.ErrorCode, re.Message)}
		}
	}
	return fmt.Errorf("%w: schema id %d: %s: %w", ErrUnavailable, id, what, err)
}

// references fetches the schemas refs name, depth first (a schema's own
// references before it), calling visit once per subject and version.
func (c *Client) references(ctx context.Context, id int, refs []sr.SchemaReference, seen map[string]bool, depth int, visit func(name string, s sr.SubjectSchema) error) error {
	const maxDepth, maxRefs = 32, 256
	if depth > maxDepth || len(seen) > maxRefs {
		return &InvalidError{SchemaID: id, Msg: fmt.Sprintf("references nest deeper than %d or number more than %d", maxDepth, maxRefs)}
	}
	for _, ref := range refs {
		k := fmt.Sprintf("%s/%d", ref.Subject, ref.Version)
		if seen[k] {
			continue
		}
		seen[k] = true
		ss, err := c.sr.SchemaByVersion(ctx, ref.Subject, ref.Version)
		if err != nil {
			return classify(id, fmt.Sprintf("fetching reference %q (subject %s version %d)", ref.Name, ref.Subject, ref.Version), err)
		}
		if err := c.references(ctx, id, ss.References, seen, depth+1, visit); err != nil {
			return err
		}
		if err := visit(ref.Name, ss); err != nil {
			return err
		}
	}
	return nil
}

// jsonSchema decodes JSON Schema framed values: the data is JSON. It is not
// validated against the schema (as Confluent's deserializer does not by
// default); the caller checks it is JSON.
type jsonSchema struct{}

func (jsonSchema) kind() string { return "JSON Schema" }

func (jsonSchema) decode(data, dst []byte, limit int) ([]byte, string) {
	if len(dst)+len(data) > limit {
		return nil, fmt.Sprintf("more than %d bytes", limit-len(dst))
	}
	return append(dst, data...), ""
}
