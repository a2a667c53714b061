package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/projector-dev/projector/sideeffects/effect"
)

// minimal is the smallest valid configuration.
const minimal = `
name: p1
kafka:
  brokers: [127.0.0.1:9092]
  instanceId: i1
  input: [in]
projections:
  - name: proj
    topic: proj.v1
    events: {A: merge, B: delete}
`

// full exercises every key.
const full = `
name: p1
kafka:
  brokers: [127.0.0.1:9092, "[::1]:9093"]
  embeddedBroker: {dir: /tmp/eb, listen: "127.0.0.1:0", partitions: 8}
  instanceId: i1
  input: [in, in2]
  deadLetterTopic: dlq
  effectsTopic: fx
  transactionTimeout: 30s
  maxRecordsPerTransaction: 100
  sessionTimeout: 1m
  tls: {enabled: true, caFile: ca.pem, certFile: c.pem, keyFile: k.pem, serverName: kafka, insecureSkipVerify: false}
  sasl: {mechanism: SCRAM-SHA-512, username: u, password: "p#w: x"}
state: {dir: /tmp/state, cacheSize: 1GiB, standbyReplicas: 2}
dedup: {retention: 7d}
gaps: {holdTimeout: 1m, onTimeout: skip, maxHeldPerAggregate: 5}
projections:
  - name: proj
    topic: proj.v1
    aggregateTypes: [Case]
    versioned: false
    events: {A: merge, B: delete}
sideEffects:
  - name: fx1
    on: [A]
    when: {field: payload.n, equals: 3}
    key: "k:{aggregateId}:{payload.a.b}"
    webhook: {url: "https://example.com/hook", timeout: 1s}
    maxAttempts: 3
    onUnknown: park
http: {listen: ":9000"}
`

func mustParse(t *testing.T, src string, env map[string]string) *Config {
	t.Helper()
	c, err := Parse([]byte(src), mapEnv(env))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return c
}

func mapEnv(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// errKeys returns the keys of every *Error in err; it fails the test when
// err holds anything else.
func errKeys(t *testing.T, err error) []string {
	t.Helper()
	es := Errors(err)
	if err != nil && len(es) == 0 {
		t.Fatalf("error is not a *config.Error: %T %v", err, err)
	}
	var keys []string
	for _, e := range es {
		keys = append(keys, e.Key)
	}
	return keys
}

// wantKey asserts that err consists of exactly one *Error with key.
func wantKey(t *testing.T, err error, key string) *Error {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want one for %q", key)
	}
	keys := errKeys(t, err)
	if len(keys) != 1 || keys[0] != key {
		t.Fatalf("error keys %q, want [%q]; error:\n%v", keys, key, err)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("errors.As(*Error) failed for %v", err)
	}
	prefix := "config: " + key + ": "
	if key == "" {
		prefix = "config: "
	}
	if !strings.HasPrefix(err.Error(), prefix) {
		t.Fatalf("message %q does not start with %q", err.Error(), prefix)
	}
	return e
}

func TestContractConfigsLoad(t *testing.T) {
	c, err := Load("../../../configs/example.yaml")
	if err != nil {
		t.Fatalf("example.yaml: %v", err)
	}
	if c.Name != "case-projector" || !c.Kafka.Embedded || len(c.Kafka.Brokers) != 0 {
		t.Errorf("example: name %q embedded %v brokers %v", c.Name, c.Kafka.Embedded, c.Kafka.Brokers)
	}
	if c.State.Dir != "./data/case-projector" {
		t.Errorf("example state.dir %q", c.State.Dir)
	}
	wantRules := map[string]string{"CaseOpened": "merge", "CaseUpdated": "merge", "CaseEscalated": "merge", "CaseClosed": "delete"}
	if len(c.Projections) != 1 || c.Projections[0].Name != "case-overview" || c.Projections[0].Topic != "case-overview.v1" ||
		!reflect.DeepEqual(c.Projections[0].Events, wantRules) {
		t.Errorf("example projections %+v", c.Projections)
	}
	if len(c.SideEffects) != 1 || c.SideEffects[0].Webhook.URL != "http://127.0.0.1:8099/notify" ||
		c.SideEffects[0].When == nil || c.SideEffects[0].When.Equals != "SLA_BREACH" {
		t.Errorf("example side effects %+v", c.SideEffects)
	}

	d, err := Load("../../../configs/demo.yaml")
	if err != nil {
		t.Fatalf("demo.yaml: %v", err)
	}
	if d.Name != "demo" || !d.Kafka.Embedded || !slices.Equal(d.Kafka.InputNames(), []string{"demo-events", "demo-billing", "demo-orders.avro"}) || d.Kafka.Input[1].Format != "cloudevents" ||
		d.Projections[0].Name != "case-overview" || d.Projections[0].Topic != "demo.case-overview.v1" ||
		d.Gaps.HoldTimeout != Duration(2*time.Second) || d.Gaps.OnTimeout != OnTimeoutDeadLetter ||
		d.SideEffects[0].Name != "sla-breach-email" {
		t.Errorf("demo: %+v", d)
	}
	if os.Getenv("PROJECTOR_DEMO_SINK") == "" && d.SideEffects[0].Webhook.URL != "http://127.0.0.1:8099/notify" {
		t.Errorf("demo sink default %q", d.SideEffects[0].Webhook.URL)
	}
	// The demo redirects its sink through the environment.
	data, err := os.ReadFile("../../../configs/demo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d = mustParse(t, string(data), map[string]string{"PROJECTOR_DEMO_SINK": "http://127.0.0.1:1234/x"})
	if d.SideEffects[0].Webhook.URL != "http://127.0.0.1:1234/x" {
		t.Errorf("demo sink override %q", d.SideEffects[0].Webhook.URL)
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	e := wantKey(t, err, "")
	if !errors.Is(err, fs.ErrNotExist) || e.Line != 0 {
		t.Fatalf("err %v", err)
	}
}

func TestDefaults(t *testing.T) {
	c := mustParse(t, minimal, nil)
	host, _ := os.Hostname()
	mustParseNoID := mustParse(t, strings.Replace(minimal, "  instanceId: i1\n", "", 1), nil)
	checks := []struct {
		name      string
		got, want any
	}{
		{"kafka.instanceId", mustParseNoID.Kafka.InstanceID, host},
		{"kafka.instanceId defaulted", mustParseNoID.Kafka.InstanceIDDefaulted, true},
		{"kafka.instanceId set", c.Kafka.InstanceIDDefaulted, false},
		{"kafka.deadLetterTopic", c.Kafka.DeadLetterTopic, "p1.dlq"},
		{"kafka.effectsTopic", c.Kafka.EffectsTopic, "p1.effects"},
		{"kafka.transactionTimeout", c.Kafka.TransactionTimeout, Duration(40 * time.Second)},
		{"kafka.maxRecordsPerTransaction", c.Kafka.MaxRecordsPerTransaction, 5000},
		{"kafka.maxRecordBytes", c.Kafka.MaxRecordBytes, ByteSize(1 << 20)},
		{"kafka.sessionTimeout", c.Kafka.SessionTimeout, Duration(45 * time.Second)},
		{"kafka.embedded", c.Kafka.Embedded, false},
		{"kafka.tls", c.Kafka.TLS, (*TLS)(nil)},
		{"kafka.sasl", c.Kafka.SASL, (*SASL)(nil)},
		{"kafka.embeddedBroker.dir", c.Kafka.EmbeddedBroker.Dir, filepath.Join("data", "embedded-kafka")},
		{"kafka.embeddedBroker.listen", c.Kafka.EmbeddedBroker.Listen, "127.0.0.1:9092"},
		{"kafka.embeddedBroker.partitions", c.Kafka.EmbeddedBroker.Partitions, 4},
		{"state.dir", c.State.Dir, "./data/p1"},
		{"state.cacheSize", c.State.CacheSize, ByteSize(64 << 20)},
		{"state.standbyReplicas", c.State.StandbyReplicas, 0},
		{"dedup.retention", c.Dedup.Retention, Duration(168 * time.Hour)},
		{"gaps.holdTimeout", c.Gaps.HoldTimeout, Duration(5 * time.Minute)},
		{"gaps.onTimeout", c.Gaps.OnTimeout, "wait"},
		{"gaps.maxHeldPerAggregate", c.Gaps.MaxHeldPerAggregate, 10000},
		{"projections[0].versioned", c.Projections[0].IsVersioned(), true},
		{"projections[0].versioned set", c.Projections[0].Versioned != nil && *c.Projections[0].Versioned, true},
		{"http.listen", c.HTTP.Listen, "127.0.0.1:9464"},
		{"http enabled", c.HTTP.Enabled(), true},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s = %#v, want %#v", ch.name, ch.got, ch.want)
		}
	}

	fx := mustParse(t, minimal+`
sideEffects:
  - {name: fx, on: [A], key: "k:{eventId}", webhook: {url: "http://h/x"}}
`, nil).SideEffects[0]
	if fx.Webhook.Timeout != Duration(5*time.Second) || fx.MaxAttempts != 8 || fx.OnUnknown != "retry" || fx.When != nil {
		t.Errorf("side effect defaults %+v", fx)
	}

	// Zero means default; explicit values are kept.
	c = mustParse(t, minimal+"gaps: {maxHeldPerAggregate: 0, holdTimeout: 0s}\n", nil)
	if c.Gaps.MaxHeldPerAggregate != 10000 || c.Gaps.HoldTimeout != Duration(5*time.Minute) {
		t.Errorf("zero values: %+v", c.Gaps)
	}
	c = mustParse(t, full, nil)
	if c.Kafka.DeadLetterTopic != "dlq" || c.Kafka.EffectsTopic != "fx" || c.Kafka.TransactionTimeout != Duration(30*time.Second) ||
		c.Kafka.MaxRecordsPerTransaction != 100 || c.Kafka.SessionTimeout != Duration(time.Minute) ||
		c.Kafka.EmbeddedBroker != (EmbeddedBroker{Dir: "/tmp/eb", Listen: "127.0.0.1:0", Partitions: 8}) ||
		*c.Kafka.TLS != (TLS{Enabled: true, CAFile: "ca.pem", CertFile: "c.pem", KeyFile: "k.pem", ServerName: "kafka"}) ||
		!c.Kafka.TLSEnabled() ||
		*c.Kafka.SASL != (SASL{Mechanism: "SCRAM-SHA-512", Username: "u", Password: "p#w: x"}) ||
		c.State != (State{Dir: "/tmp/state", CacheSize: 1 << 30, StandbyReplicas: 2}) ||
		c.Dedup.Retention != Duration(7*24*time.Hour) ||
		c.Gaps != (Gaps{HoldTimeout: Duration(time.Minute), OnTimeout: "skip", MaxHeldPerAggregate: 5}) ||
		c.Projections[0].IsVersioned() || !slices.Equal(c.Projections[0].AggregateTypes, []string{"Case"}) ||
		c.HTTP.Listen != ":9000" {
		t.Errorf("explicit values not kept: %+v", c)
	}
	s := c.SideEffects[0]
	if s.When.Field != "payload.n" || s.When.Equals != float64(3) || s.Webhook.Timeout != Duration(time.Second) ||
		s.MaxAttempts != 3 || s.OnUnknown != "park" || s.Key != "k:{aggregateId}:{payload.a.b}" {
		t.Errorf("side effect %+v when %+v", s, s.When)
	}
}

func TestDefault(t *testing.T) {
	c := Default()
	if len(c.Projections) != 0 || c.Kafka.TransactionTimeout != Duration(DefaultTransactionTimeout) ||
		c.HTTP.Listen != DefaultHTTPListen || c.Kafka.DeadLetterTopic != "" || c.State.Dir != "" {
		t.Fatalf("Default() = %+v", c)
	}
	// Filling in the required keys makes it valid.
	c.Name = "x"
	c.Kafka.Embedded = true
	c.Kafka.Input = []InputTopic{{Topic: "in"}}
	c.Projections = []Projection{{Name: "p", Topic: "t", Events: map[string]string{"E": RuleMerge}}}
	c.ApplyDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	before := *c
	c.ApplyDefaults() // idempotent
	if !reflect.DeepEqual(before, *c) {
		t.Fatal("ApplyDefaults is not idempotent")
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		key    string
		mutate func(c *Config)
	}{
		{"name", func(c *Config) { c.Name = "" }},
		{"name", func(c *Config) { c.Name = "a b" }},
		{"name", func(c *Config) { c.Name = "a/b" }},
		{"name", func(c *Config) { c.Name = ".." }},
		{"name", func(c *Config) { c.Name = strings.Repeat("a", 201) }},
		{"kafka.brokers", func(c *Config) { c.Kafka.Brokers = nil }},
		{"kafka.brokers", func(c *Config) { c.Kafka.Embedded = true }},
		{"kafka.brokers[1]", func(c *Config) { c.Kafka.Brokers = append(c.Kafka.Brokers, "localhost") }},
		{"kafka.brokers[0]", func(c *Config) { c.Kafka.Brokers[0] = ":9092" }},
		{"kafka.brokers[0]", func(c *Config) { c.Kafka.Brokers[0] = "h:0" }},
		{"kafka.brokers[0]", func(c *Config) { c.Kafka.Brokers[0] = "h:65536" }},
		{"kafka.brokers[0]", func(c *Config) { c.Kafka.Brokers[0] = "embedded" }},
		{"kafka.instanceId", func(c *Config) { c.Kafka.InstanceID = "" }},
		{"kafka.instanceId", func(c *Config) { c.Kafka.InstanceID = "a:b" }},
		{"kafka.input", func(c *Config) { c.Kafka.Input = nil }},
		{"kafka.input[0]", func(c *Config) { c.Kafka.Input[0].Topic = "" }},
		{"kafka.input[0]", func(c *Config) { c.Kafka.Input[0].Topic = "bad topic" }},
		{"kafka.input[0]", func(c *Config) { c.Kafka.Input[0].Topic = ".." }},
		{"kafka.input[0]", func(c *Config) { c.Kafka.Input[0].Topic = strings.Repeat("t", 250) }},
		{"kafka.input[1]", func(c *Config) { c.Kafka.Input = append(c.Kafka.Input, InputTopic{Topic: "in"}) }},
		{"kafka.deadLetterTopic", func(c *Config) { c.Kafka.DeadLetterTopic = "in" }},
		{"kafka.deadLetterTopic", func(c *Config) { c.Kafka.DeadLetterTopic = "x*" }},
		{"kafka.deadLetterTopic", func(c *Config) { c.Kafka.DeadLetterTopic = "" }},
		{"kafka.effectsTopic", func(c *Config) { c.Kafka.EffectsTopic = c.Kafka.DeadLetterTopic }},
		{"kafka.effectsTopic", func(c *Config) { c.Kafka.EffectsTopic = "in" }},
		{"kafka.transactionTimeout", func(c *Config) { c.Kafka.TransactionTimeout = -1 }},
		{"kafka.transactionTimeout", func(c *Config) { c.Kafka.TransactionTimeout = Duration(15 * time.Minute) }},
		{"kafka.maxRecordsPerTransaction", func(c *Config) { c.Kafka.MaxRecordsPerTransaction = -1 }},
		{"kafka.maxRecordsPerTransaction", func(c *Config) { c.Kafka.MaxRecordsPerTransaction = 1_000_001 }},
		{"kafka.maxRecordBytes", func(c *Config) { c.Kafka.MaxRecordBytes = 512 }},
		{"kafka.maxRecordBytes", func(c *Config) { c.Kafka.MaxRecordBytes = 65 << 20 }},
		{"kafka.sessionTimeout", func(c *Config) { c.Kafka.SessionTimeout = -Duration(time.Second) }},
		{"kafka.tls.keyFile", func(c *Config) { c.Kafka.TLS = &TLS{Enabled: true, CertFile: "c"} }},
		{"kafka.tls.certFile", func(c *Config) { c.Kafka.TLS = &TLS{Enabled: true, KeyFile: "k"} }},
		{"kafka.sasl.mechanism", func(c *Config) { c.Kafka.SASL = &SASL{Mechanism: "GSSAPI", Username: "u", Password: "p"} }},
		{"kafka.sasl.mechanism", func(c *Config) { c.Kafka.SASL = &SASL{Username: "u", Password: "p"} }},
		{"kafka.sasl.username", func(c *Config) { c.Kafka.SASL = &SASL{Mechanism: "PLAIN", Password: "p"} }},
		{"kafka.sasl.password", func(c *Config) { c.Kafka.SASL = &SASL{Mechanism: "PLAIN", Username: "u"} }},
		{"kafka.embeddedBroker.listen", func(c *Config) { c.Kafka.EmbeddedBroker.Listen = "nohost" }},
		{"kafka.embeddedBroker.partitions", func(c *Config) { c.Kafka.EmbeddedBroker.Partitions = 0 }},
		{"kafka.embeddedBroker.partitions", func(c *Config) { c.Kafka.EmbeddedBroker.Partitions = 1025 }},
		{"kafka.embeddedBroker.dir", func(c *Config) {
			c.Kafka.Brokers, c.Kafka.Embedded = nil, true
			c.Kafka.EmbeddedBroker.Dir = c.State.Dir + "/kafka"
		}},
		{"kafka.embeddedBroker.dir", func(c *Config) {
			c.Kafka.Brokers, c.Kafka.Embedded = nil, true
			c.Kafka.EmbeddedBroker.Dir = ""
		}},
		{"state.dir", func(c *Config) { c.State.Dir = "" }},
		{"state.cacheSize", func(c *Config) { c.State.CacheSize = -1 }},
		{"state.standbyReplicas", func(c *Config) { c.State.StandbyReplicas = -1 }},
		{"state.standbyReplicas", func(c *Config) { c.State.StandbyReplicas = 17 }},
		{"dedup.retention", func(c *Config) { c.Dedup.Retention = -1 }},
		{"gaps.holdTimeout", func(c *Config) { c.Gaps.HoldTimeout = -1 }},
		{"gaps.onTimeout", func(c *Config) { c.Gaps.OnTimeout = "drop" }},
		{"gaps.maxHeldPerAggregate", func(c *Config) { c.Gaps.MaxHeldPerAggregate = -1 }},
		{"projections", func(c *Config) { c.Projections = nil }},
		{"projections[0].name", func(c *Config) { c.Projections[0].Name = "" }},
		{"projections[0].name", func(c *Config) { c.Projections[0].Name = "a b" }},
		{"projections[1].name", func(c *Config) {
			p := c.Projections[0]
			p.Topic = "other"
			c.Projections = append(c.Projections, p)
		}},
		{"projections[0].topic", func(c *Config) { c.Projections[0].Topic = "" }},
		{"projections[0].topic", func(c *Config) { c.Projections[0].Topic = "a/b" }},
		{"projections[0].topic", func(c *Config) { c.Projections[0].Topic = "in" }},
		{"projections[0].topic", func(c *Config) { c.Projections[0].Topic = c.Kafka.DeadLetterTopic }},
		{"projections[1].topic", func(c *Config) {
			p := c.Projections[0]
			p.Name = "other"
			c.Projections = append(c.Projections, p)
		}},
		{"projections[0].aggregateTypes[0]", func(c *Config) { c.Projections[0].AggregateTypes = []string{""} }},
		{"projections[0].aggregateTypes[1]", func(c *Config) { c.Projections[0].AggregateTypes = []string{"T", "T"} }},
		{"projections[0].events", func(c *Config) { c.Projections[0].Events = nil }},
		{"projections[0].events", func(c *Config) { c.Projections[0].Events[""] = "merge" }},
		{"projections[0].events.A", func(c *Config) { c.Projections[0].Events["A"] = "upsert" }},
		{"projections[0].events.B", func(c *Config) { c.Projections[0].Events["B"] = "" }},
		{"sideEffects[0].name", func(c *Config) { c.SideEffects[0].Name = "" }},
		{"sideEffects[0].name", func(c *Config) { c.SideEffects[0].Name = "x y" }},
		{"sideEffects[1].name", func(c *Config) { c.SideEffects = append(c.SideEffects, c.SideEffects[0]) }},
		{"sideEffects[0].on", func(c *Config) { c.SideEffects[0].On = nil }},
		{"sideEffects[0].on[0]", func(c *Config) { c.SideEffects[0].On = []string{""} }},
		{"sideEffects[0].on[1]", func(c *Config) { c.SideEffects[0].On = []string{"A", "A"} }},
		{"sideEffects[0].when.field", func(c *Config) { c.SideEffects[0].When.Field = "" }},
		{"sideEffects[0].when.field", func(c *Config) { c.SideEffects[0].When.Field = "reasonCode" }},
		{"sideEffects[0].when.field", func(c *Config) { c.SideEffects[0].When.Field = "eventType.x" }},
		{"sideEffects[0].when.field", func(c *Config) { c.SideEffects[0].When.Field = "payload..x" }},
		{"sideEffects[0].when.equals", func(c *Config) { c.SideEffects[0].When.Equals = nil }},
		{"sideEffects[0].key", func(c *Config) { c.SideEffects[0].Key = "" }},
		{"sideEffects[0].key", func(c *Config) { c.SideEffects[0].Key = "k:{aggregateID}" }},
		{"sideEffects[0].key", func(c *Config) { c.SideEffects[0].Key = "k:{aggregateId" }},
		{"sideEffects[0].key", func(c *Config) { c.SideEffects[0].Key = "k:aggregateId}" }},
		{"sideEffects[0].webhook.url", func(c *Config) { c.SideEffects[0].Webhook.URL = "" }},
		{"sideEffects[0].webhook.url", func(c *Config) { c.SideEffects[0].Webhook.URL = "ftp://h/x" }},
		{"sideEffects[0].webhook.url", func(c *Config) { c.SideEffects[0].Webhook.URL = "/notify" }},
		{"sideEffects[0].webhook.url", func(c *Config) { c.SideEffects[0].Webhook.URL = "http:///x" }},
		{"sideEffects[0].webhook.url", func(c *Config) { c.SideEffects[0].Webhook.URL = "http://h/%zz" }},
		{"sideEffects[0].webhook.timeout", func(c *Config) { c.SideEffects[0].Webhook.Timeout = -1 }},
		{"sideEffects[0].maxAttempts", func(c *Config) { c.SideEffects[0].MaxAttempts = 0 }},
		{"sideEffects[0].maxAttempts", func(c *Config) { c.SideEffects[0].MaxAttempts = 1001 }},
		{"sideEffects[0].onUnknown", func(c *Config) { c.SideEffects[0].OnUnknown = "ignore" }},
		{"http.listen", func(c *Config) { c.HTTP.Listen = "9464" }},
		{"http.listen", func(c *Config) { c.HTTP.Listen = "h:99999" }},
	}
	base := minimal + `
sideEffects:
  - name: fx
    on: [A]
    when: {field: payload.reasonCode, equals: X}
    key: "k:{aggregateId}:v{aggregateVersion}"
    webhook: {url: "http://127.0.0.1:8099/notify"}
`
	if _, err := Parse([]byte(base), nil); err != nil {
		t.Fatalf("base: %v", err)
	}
	for _, tt := range tests {
		c := mustParse(t, base, nil)
		tt.mutate(c)
		err := c.Validate()
		t.Run(tt.key, func(t *testing.T) {
			e := wantKey(t, err, tt.key)
			if e.Line != 0 {
				t.Errorf("Validate set line %d", e.Line)
			}
		})
	}
}

func TestValidateReportsAll(t *testing.T) {
	c := mustParse(t, minimal, nil)
	c.Gaps.OnTimeout = "x"
	c.Kafka.MaxRecordsPerTransaction = -5
	c.Projections[0].Events["A"] = "x"
	keys := errKeys(t, c.Validate())
	want := []string{"kafka.maxRecordsPerTransaction", "gaps.onTimeout", "projections[0].events.A"}
	if !slices.Equal(keys, want) {
		t.Fatalf("keys %q, want %q", keys, want)
	}
}

// Parse reports Validate's errors with the line of the key, or of its
// nearest ancestor when the key is missing.
func TestParseValidationLines(t *testing.T) {
	src := `name: p1
kafka:
  brokers: [127.0.0.1:9092]
  input: [in]
gaps:
  onTimeout: forever
projections:
  - name: proj
    topic: proj.v1
    events:
      A: merge
      B: upsert
sideEffects:
  - name: fx
    on: [A]
    webhook: {url: "http://h/x"}
`
	_, err := Parse([]byte(src), nil)
	es := Errors(err)
	got := map[string]int{}
	for _, e := range es {
		got[e.Key] = e.Line
	}
	want := map[string]int{"gaps.onTimeout": 6, "projections[0].events.B": 12, "sideEffects[0].key": 14}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v\n%v", got, want, err)
	}
	if !strings.Contains(err.Error(), "config: gaps.onTimeout: must be one of wait, skip, deadletter, got \"forever\" (line 6)") {
		t.Fatalf("message: %v", err)
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name, src, key string
		line           int
		msg            string // substring
	}{
		{"empty file", "", "", 0, "empty"},
		{"only comments", "# nothing\n", "", 0, "empty"},
		{"null document", "~\n", "", 1, "empty"},
		{"list document", "- a\n- b\n", "", 1, "mapping"},
		{"scalar document", "hello\n", "", 1, "mapping"},
		{"two documents", minimal + "---\nname: x\n", "", 11, "more than one"},
		{"syntax", "name: a\n  kafka: [\n", "", 2, "invalid YAML"},
		{"syntax flow reference", "name: a\nkafka: {input: [${X}]}\n", "", -1, `quote ${...} references`},
		{"top-level unknown", minimal + "nmae: x\n", "nmae", 11, `did you mean "name"?`},
		{"top-level unknown far", minimal + "zzz: x\n", "zzz", 11, "allowed keys: name, kafka"},
		{"kafka unknown", strings.Replace(minimal, "  input:", "  brokerz: [a:1]\n  input:", 1), "kafka.brokerz", 6, `did you mean "brokers"?`},
		{"case typo", strings.Replace(minimal, "instanceId", "instanceID", 1), "kafka.instanceID", 5, `did you mean "instanceId"?`},
		{"kafka embedded key", strings.Replace(minimal, "  input:", "  embedded: true\n  input:", 1), "kafka.embedded", 6, "brokers: embedded"},
		{"embeddedBroker unknown", strings.Replace(minimal, "  input:", "  embeddedBroker: {port: 1}\n  input:", 1), "kafka.embeddedBroker.port", 6, "unknown key"},
		{"tls unknown", strings.Replace(minimal, "  input:", "  tls: {enable: true}\n  input:", 1), "kafka.tls.enable", 6, `did you mean "enabled"?`},
		{"projection unknown", strings.Replace(minimal, "    topic:", "    topics: x\n    topic:", 1), "projections[0].topics", 9, `did you mean "topic"?`},
		{"webhook unknown", minimal + "sideEffects:\n  - name: fx\n    webhook:\n      url: http://h/x\n      method: PUT\n", "sideEffects[0].webhook.method", 15, "unknown key"},
		{"when unknown", minimal + "sideEffects:\n  - when: {field: payload.x, value: 1}\n", "sideEffects[0].when.value", 12, "unknown key"},
		{"duplicate key", minimal + "name: again\n", "name", 11, "duplicate key (first given at line 2)"},
		{"duplicate event", strings.Replace(minimal, "B: delete", "A: delete", 1), "projections[0].events.A", 10, "duplicate key"},
		{"brokers int", strings.Replace(minimal, "[127.0.0.1:9092]", "5", 1), "kafka.brokers", 4, "got integer 5"},
		{"brokers mapping", strings.Replace(minimal, "[127.0.0.1:9092]", "{a: b}", 1), "kafka.brokers", 4, "got a mapping"},
		{"brokers nested list", strings.Replace(minimal, "[127.0.0.1:9092]", "[[a:1]]", 1), "kafka.brokers[0]", 4, "expected a string, got a list"},
		{"input scalar", strings.Replace(minimal, "[in]", "in", 1), "kafka.input", 6, "write [in]"},
		{"kafka scalar", "name: x\nkafka: localhost\n", "kafka", 2, "expected a mapping with keys brokers"},
		{"projections mapping", "name: x\nprojections: {name: p}\n", "projections", 2, "expected a list"},
		{"events list", strings.Replace(minimal, "{A: merge, B: delete}", "[A, B]", 1), "projections[0].events", 10, "expected a mapping"},
		{"events rule mapping", strings.Replace(minimal, "B: delete", "B: {rule: delete}", 1), "projections[0].events.B", 10, "expected a string"},
		{"int", minimal + "gaps: {maxHeldPerAggregate: lots}\n", "gaps.maxHeldPerAggregate", 11, `expected an integer, got string "lots"`},
		{"int float", minimal + "gaps: {maxHeldPerAggregate: 1.5}\n", "gaps.maxHeldPerAggregate", 11, "got number 1.5"},
		{"bool", strings.Replace(minimal, "    events:", "    versioned: sometimes\n    events:", 1), "projections[0].versioned", 10, "expected true or false"},
		{"duration no unit", minimal + "dedup: {retention: 5}\n", "dedup.retention", 11, "a unit is required"},
		{"duration garbage", minimal + "dedup: {retention: soon}\n", "dedup.retention", 11, `invalid duration "soon"`},
		{"duration list", minimal + "dedup: {retention: [5m]}\n", "dedup.retention", 11, "expected a duration"},
		{"duration bad days", minimal + "dedup: {retention: 1.5d}\n", "dedup.retention", 11, "whole number"},
		{"size", minimal + "state: {cacheSize: lots}\n", "state.cacheSize", 11, `invalid size "lots"`},
		{"string from list", "name: [a]\n", "name", 1, "expected a string, got a list"},
		{"merge bad", minimal + "http: {<<: 5}\n", "http.<<", 11, "merge key"},
		{"non-string key", minimal + "http: {[a]: 5}\n", "http", 11, "keys must be strings"},
		{"equals not JSON", minimal + "sideEffects:\n  - when: {field: payload.x, equals: {[1]: 2}}\n", "sideEffects[0].when.equals", 12, "not representable as JSON"},
		{"int from env not int", minimal + "gaps: {maxHeldPerAggregate: \"${EMPTY:-x}\"}\n", "gaps.maxHeldPerAggregate", 11, `expected an integer, got string "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.src), nil)
			e := wantKey(t, err, tt.key)
			if tt.line >= 0 && e.Line != tt.line {
				t.Errorf("line %d, want %d (%v)", e.Line, tt.line, err)
			}
			if !strings.Contains(e.Msg, tt.msg) {
				t.Errorf("message %q does not contain %q", e.Msg, tt.msg)
			}
		})
	}
}

// Decode errors are all reported, in document order, and Validate does not
// run on a half-decoded config.
func TestDecodeErrorsAll(t *testing.T) {
	src := "name: x\nkafka: {brokerz: 1, input: in}\nfoo: 1\n"
	keys := errKeys(t, func() error { _, err := Parse([]byte(src), nil); return err }())
	if want := []string{"kafka.brokerz", "kafka.input", "foo"}; !slices.Equal(keys, want) {
		t.Fatalf("keys %q, want %q", keys, want)
	}
}

func TestBrokers(t *testing.T) {
	tests := []struct {
		name     string
		yaml     string
		brokers  []string
		embedded bool
		errKey   string
	}{
		{"list", "[a:1, b:2]", []string{"a:1", "b:2"}, false, ""},
		{"block list", "\n    - a:1\n    - \"[::1]:9092\"", []string{"a:1", "[::1]:9092"}, false, ""},
		{"embedded", "embedded", nil, true, ""},
		{"comma string", `"a:1, b:2"`, []string{"a:1", "b:2"}, false, ""},
		{"one string", "a:1", []string{"a:1"}, false, ""},
		{"missing", "", nil, false, "kafka.brokers"},
		{"empty list", "[]", nil, false, "kafka.brokers"},
		{"empty string", `""`, nil, false, "kafka.brokers"},
		{"no port", "localhost", nil, false, "kafka.brokers[0]"},
		{"bad port", "[a:1, b:x]", nil, false, "kafka.brokers[1]"},
		{"embedded in list", "[embedded]", nil, false, "kafka.brokers[0]"},
		{"integer", "5", nil, false, "kafka.brokers"},
		{"boolean", "true", nil, false, "kafka.brokers"},
		{"Embedded", "Embedded", nil, false, "kafka.brokers[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "name: x\nkafka:\n  brokers: " + tt.yaml + "\n  input: [in]\nprojections: [{name: p, topic: t, events: {A: merge}}]\n"
			c, err := Parse([]byte(src), nil)
			if tt.errKey != "" {
				wantKey(t, err, tt.errKey)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(c.Kafka.Brokers, tt.brokers) || c.Kafka.Embedded != tt.embedded {
				t.Fatalf("brokers %q embedded %v", c.Kafka.Brokers, c.Kafka.Embedded)
			}
		})
	}
}

func TestSetBrokers(t *testing.T) {
	var k Kafka
	if err := k.SetBrokers("embedded"); err != nil || !k.Embedded || k.Brokers != nil {
		t.Fatalf("embedded: %v %+v", err, k)
	}
	if err := k.SetBrokers("a:1,b:2"); err != nil || k.Embedded || !slices.Equal(k.Brokers, []string{"a:1", "b:2"}) {
		t.Fatalf("list: %v %+v", err, k)
	}
	for _, bad := range []string{"", " , ", "a", "a:1,b"} {
		if err := k.SetBrokers(bad); err == nil {
			t.Errorf("SetBrokers(%q): no error", bad)
		} else {
			wantKey(t, err, "kafka.brokers")
		}
	}
	if !slices.Equal(k.Brokers, []string{"a:1", "b:2"}) {
		t.Fatalf("failed SetBrokers changed the value: %+v", k)
	}
}

func TestEnvExpansion(t *testing.T) {
	env := map[string]string{
		"NAME": "fromenv", "N": "7", "EMPTY": "", "URL": "http://h:1/x", "PW": "a #b: c, [d]",
		"ON": "true", "LISTEN": "127.0.0.1:1",
	}
	src := `name: ${NAME}
kafka:
  brokers: ${BROKERS:-embedded}   # ${NOT_EXPANDED_IN_COMMENTS}
  input: ["${IN:-in}", "pre-${NAME}-post"]
  sasl: {mechanism: PLAIN, username: u, password: "${PW}"}
  maxRecordsPerTransaction: ${N}
  sessionTimeout: "${N}s"
  tls: {enabled: "${ON}"}
gaps:
  onTimeout: ${EMPTY:-skip}
  holdTimeout: ${HOLD:-${N}s}
projections:
  - name: p
    topic: t-$${LITERAL}-$x
    events: {A: merge}
sideEffects:
  - name: fx
    on: [A]
    when: {field: payload.n, equals: {k: "${N}", l: ["$${X}"]}}
    key: "k:{eventId}"
    webhook: {url: "${URL}"}
http:
  listen: ${LISTEN}
`
	c := mustParse(t, strings.Replace(src, "t-$${LITERAL}-$x", "t", 1), env)
	if c.Name != "fromenv" || !c.Kafka.Embedded || !slices.Equal(c.Kafka.InputNames(), []string{"in", "pre-fromenv-post"}) ||
		c.Kafka.SASL.Password != env["PW"] || c.Kafka.MaxRecordsPerTransaction != 7 || !c.Kafka.TLSEnabled() ||
		c.Kafka.SessionTimeout != Duration(7*time.Second) ||
		c.Gaps.OnTimeout != "skip" || c.Gaps.HoldTimeout != Duration(7*time.Second) ||
		c.SideEffects[0].Webhook.URL != env["URL"] || c.HTTP.Listen != env["LISTEN"] {
		t.Fatalf("expanded config: %+v", c)
	}
	if want := map[string]any{"k": "7", "l": []any{"${X}"}}; !reflect.DeepEqual(c.SideEffects[0].When.Equals, want) {
		t.Fatalf("equals %#v, want %#v", c.SideEffects[0].When.Equals, want)
	}

	// $${ is a literal ${ and a lone $ is kept; the topic name then fails
	// validation, which shows the literal text.
	_, err := Parse([]byte(src), mapEnv(env))
	e := wantKey(t, err, "projections[0].topic")
	if !strings.Contains(e.Msg, `"t-${LITERAL}-$x"`) || e.Line != 14 {
		t.Fatalf("literal: %v", err)
	}

	tests := []struct {
		name, line, key, msg string
		wantLine             int
	}{
		{"unset", "name: ${NOPE}", "name", "environment variable NOPE is not set", 1},
		{"unset in list", "kafka: {input: [a, '${NOPE}']}", "kafka.input[1]", "NOPE", 1},
		{"unset in default", "name: ${A:-${NOPE}}", "name", "NOPE", 1},
		{"malformed", "name: ${1X}", "name", "malformed", 1},
		{"unterminated", "name: ${X:-abc", "name", "missing }", 1},
		{"no name", "name: ${}", "name", "malformed", 1},
		{"bad operator", "name: ${X-def}", "name", "malformed", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.line+"\n"), nil)
			e := wantKey(t, err, tt.key)
			if !strings.Contains(e.Msg, tt.msg) || e.Line != tt.wantLine {
				t.Fatalf("got %v", err)
			}
		})
	}
	// An unset variable's error names its line in a longer file.
	_, err = Parse([]byte(strings.Replace(minimal, "proj.v1", "${TOPIC}", 1)), nil)
	e = wantKey(t, err, "projections[0].topic")
	if e.Line != 9 || !strings.Contains(e.Error(), "TOPIC is not set") || !strings.HasSuffix(e.Error(), "(line 9)") {
		t.Fatalf("got %v", err)
	}
	// Default used when set but empty (as in the shell); value used when set.
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{{nil, "def"}, {map[string]string{"X": ""}, "def"}, {map[string]string{"X": "val"}, "val"}} {
		got, err := expandEnv("${X:-def}", mapEnv(tc.env))
		if err != nil || got != tc.want {
			t.Errorf("env %v: %q %v", tc.env, got, err)
		}
	}
	// Defined but empty without default: empty.
	if got, err := expandEnv("a${X}b", mapEnv(map[string]string{"X": ""})); err != nil || got != "ab" {
		t.Errorf("empty: %q %v", got, err)
	}
	// A value containing ${ is not expanded again.
	if got, err := expandEnv("${X}", mapEnv(map[string]string{"X": "${Y}"})); err != nil || got != "${Y}" {
		t.Errorf("no re-expansion: %q %v", got, err)
	}
	// Load uses the process environment.
	t.Setenv("PROJECTOR_TEST_NAME", "envname")
	path := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(path, []byte(strings.Replace(minimal, "name: p1", "name: ${PROJECTOR_TEST_NAME}", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := Load(path); err != nil || c.Name != "envname" {
		t.Fatalf("Load: %v", err)
	}
}

// An empty expansion is an explicit empty string: http.listen "" disables
// the server, and a required key reports "required".
func TestEnvEmptyAndHTTPOff(t *testing.T) {
	for _, tc := range []struct{ listen, want string }{
		{`""`, "off"}, {"off", "off"}, {"${L:-}", "off"}, {"~", DefaultHTTPListen}, {"", DefaultHTTPListen},
	} {
		c := mustParse(t, minimal+"http:\n  listen: "+tc.listen+"\n", nil)
		if c.HTTP.Listen != tc.want {
			t.Errorf("listen %s: got %q, want %q", tc.listen, c.HTTP.Listen, tc.want)
		}
		if c.HTTP.Enabled() != (tc.want != "off") {
			t.Errorf("listen %s: Enabled %v", tc.listen, c.HTTP.Enabled())
		}
	}
	_, err := Parse([]byte(strings.Replace(minimal, "name: p1", "name: ${N:-}", 1)), nil)
	if e := wantKey(t, err, "name"); e.Msg != "required" || e.Line != 2 {
		t.Fatalf("got %v", err)
	}
}

func TestAnchorsAndMerge(t *testing.T) {
	src := minimal + `
sideEffects:
  - &base
    name: fx1
    on: [A]
    key: "k:{eventId}:{effect}"
    webhook: &hook {url: "http://h/${P:-x}", timeout: 2s}
  - <<: *base
    name: fx2
    webhook:
      <<: *hook
      timeout: 3s
`
	c := mustParse(t, src, nil)
	a, b := c.SideEffects[0], c.SideEffects[1]
	if a.Name != "fx1" || b.Name != "fx2" || !slices.Equal(b.On, []string{"A"}) || b.Key != a.Key ||
		b.Webhook.URL != "http://h/x" || a.Webhook.URL != "http://h/x" ||
		a.Webhook.Timeout != Duration(2*time.Second) || b.Webhook.Timeout != Duration(3*time.Second) {
		t.Fatalf("merged: %+v %+v", a, b)
	}
	// Unknown keys inside an anchor are still caught.
	_, err := Parse([]byte(strings.Replace(src, "timeout: 2s", "timeout: 2s, retries: 1", 1)), nil)
	if keys := errKeys(t, err); !slices.Contains(keys, "sideEffects[0].webhook.retries") {
		t.Fatalf("keys %q", keys)
	}
}

func TestAliasBomb(t *testing.T) {
	// Ten levels of ten-fold aliases: 10^10 nodes if walked naively.
	var b strings.Builder
	b.WriteString(strings.TrimPrefix(minimal, "\n"))
	b.WriteString("sideEffects:\n  - when:\n      field: payload.x\n      equals:\n        a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 10; i++ {
		prev := fmt.Sprintf("*a%d", i-1)
		fmt.Fprintf(&b, "        a%d: &a%d [%s%s]\n", i, i, strings.Repeat(prev+", ", 9), prev)
	}
	_, err := Parse([]byte(b.String()), nil)
	es := Errors(err)
	if len(es) != 1 || !strings.HasPrefix(es[0].Key, "sideEffects[0].when.equals") || !strings.Contains(es[0].Msg, "too large") {
		t.Fatalf("got %v", err)
	}
}

func TestDuration(t *testing.T) {
	good := map[string]time.Duration{
		"40s": 40 * time.Second, "5m": 5 * time.Minute, "168h": 168 * time.Hour, "1h30m": 90 * time.Minute,
		"7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour, "0d": 0, "250ms": 250 * time.Millisecond,
		"-5s": -5 * time.Second, "-1d": -24 * time.Hour, " 5m ": 5 * time.Minute, "0": 0,
	}
	for s, want := range good {
		got, err := ParseDuration(s)
		if err != nil || got != Duration(want) {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "5", "1.5", "d", "1.5d", "xd", "5x", "1d-5h", "-", "1d1d", "h", "106751991167301d", "106751d23h48m"} {
		if got, err := ParseDuration(s); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want error", s, got)
		}
	}
	if Duration(90*time.Second).String() != "1m30s" {
		t.Error("String")
	}
	var d Duration
	if err := d.UnmarshalText([]byte("2d")); err != nil || d.Std() != 48*time.Hour {
		t.Errorf("UnmarshalText: %v %v", d, err)
	}
}

func TestByteSize(t *testing.T) {
	good := map[string]ByteSize{
		"0": 0, "1024": 1024, "64MiB": 64 << 20, "64mib": 64 << 20, "64 MiB": 64 << 20, "1GiB": 1 << 30,
		"1.5GiB": 3 << 29, "500MB": 500e6, "1kb": 1000, "2KiB": 2048, "7B": 7, "1TiB": 1 << 40,
	}
	for s, want := range good {
		got, err := ParseByteSize(s)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "MiB", "lots", "1.2.3MB", "64 PiB", "9999999999TiB", "NaN", "Inf"} {
		if got, err := ParseByteSize(s); err == nil {
			t.Errorf("ParseByteSize(%q) = %v, want error", s, got)
		}
	}
	for b, want := range map[ByteSize]string{64 << 20: "64MiB", 1 << 30: "1GiB", 1000: "1000B", 0: "0B", 3 << 10: "3KiB"} {
		if b.String() != want {
			t.Errorf("%d.String() = %q, want %q", int64(b), b.String(), want)
		}
	}
	// Integer bytes in YAML.
	c := mustParse(t, minimal+"state: {cacheSize: 1048576}\n", nil)
	if c.State.CacheSize != 1<<20 {
		t.Errorf("integer cacheSize %v", c.State.CacheSize)
	}
}

func TestCondition(t *testing.T) {
	c := mustParse(t, minimal+`
sideEffects:
  - {name: a, on: [A], key: k, webhook: {url: "http://h"}, when: {field: payload.n, equals: 3}}
  - {name: b, on: [A], key: k, webhook: {url: "http://h"}, when: {field: payload.o, equals: {y: [1, true], x: "s"}}}
  - {name: c, on: [A], key: k, webhook: {url: "http://h"}, when: {field: tenantId, equals: "007"}}
  - {name: d, on: [A], key: k, webhook: {url: "http://h"}, when: {field: payload.day, equals: 2026-01-01}}
`, nil)
	// The condition as the library reads it (internal/app/wiring converts
	// it so): what YAML gives Equals must match what events carry.
	when := func(i int) *effect.Condition { w := effect.Condition(*c.SideEffects[i].When); return &w }
	if d := when(3); d.Equals != "2026-01-01" || !d.Match("2026-01-01") {
		t.Errorf("timestamp equals %#v", d.Equals)
	}
	n, o, s := when(0), when(1), when(2)
	if !n.Match(float64(3)) || !n.Match(3) || n.Match("3") || n.Match(nil) {
		t.Error("number match")
	}
	if !o.Match(map[string]any{"x": "s", "y": []any{1.0, true}}) || o.Match(map[string]any{"x": "s"}) {
		t.Error("object match")
	}
	if !s.Match("007") || s.Match(7) {
		t.Error("string match")
	}
	if !slices.Equal(n.Path(), []string{"payload", "n"}) {
		t.Errorf("Path %q", n.Path())
	}
}

func TestErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{Key: "kafka.brokers", Msg: "required"}, "config: kafka.brokers: required"},
		{Error{Key: "gaps.onTimeout", Msg: "bad", Line: 7}, "config: gaps.onTimeout: bad (line 7)"},
		{Error{Msg: "the file is empty"}, "config: the file is empty"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
	if Errors(nil) != nil || Errors(errors.New("x")) != nil {
		t.Error("Errors of non-config errors")
	}
}

func TestMergeList(t *testing.T) {
	src := minimal + `
sideEffects:
  - name: fx
    on: [A]
    key: k
    webhook:
      <<: [{url: "http://first/x"}, {url: "http://second/x", timeout: 9s}]
      timeout: 1s
`
	w := mustParse(t, src, nil).SideEffects[0].Webhook
	if w.URL != "http://first/x" || w.Timeout != Duration(time.Second) {
		t.Fatalf("webhook %+v", w)
	}
	_, err := Parse([]byte(strings.Replace(src, `{url: "http://first/x"}`, "5", 1)), nil)
	wantKey(t, err, "sideEffects[0].webhook.<<")
}

func TestProjectionSelects(t *testing.T) {
	p := Projection{}
	if !p.Selects("X") {
		t.Error("no filter must select everything")
	}
	p.AggregateTypes = []string{"A", "B"}
	if !p.Selects("B") || p.Selects("C") || p.Selects("") {
		t.Error("filter")
	}
}

// Duration and ByteSize also work with yaml.v3 directly (e.g. for printing
// the effective configuration).
func TestUnitsYAML(t *testing.T) {
	type units struct {
		D Duration `yaml:"d"`
		B ByteSize `yaml:"b"`
	}
	out, err := yaml.Marshal(units{D: Duration(36 * time.Hour), B: 64 << 20})
	if err != nil || string(out) != "d: 36h0m0s\nb: 64MiB\n" {
		t.Fatalf("Marshal: %q %v", out, err)
	}
	var u units
	if err := yaml.Unmarshal([]byte("d: 1d12h\nb: 1GiB\n"), &u); err != nil || u.D != Duration(36*time.Hour) || u.B != 1<<30 {
		t.Fatalf("Unmarshal: %+v %v", u, err)
	}
	for _, bad := range []string{"d: [1]\n", "b: {a: 1}\n", "d: 5\n", "b: x\n"} {
		if err := yaml.Unmarshal([]byte(bad), &u); err == nil {
			t.Errorf("Unmarshal(%q): no error", bad)
		}
	}
}

func TestOrDefault(t *testing.T) {
	if got := OrDefault(0, 5); got != 5 {
		t.Errorf("OrDefault(0, 5) = %d", got)
	}
	if got := OrDefault(-1, 5); got != 5 {
		t.Errorf("OrDefault(-1, 5) = %d", got)
	}
	if got := OrDefault(3, 5); got != 3 {
		t.Errorf("OrDefault(3, 5) = %d", got)
	}
	if got := OrDefault(time.Duration(0), time.Second); got != time.Second {
		t.Errorf("OrDefault(0s, 1s) = %s", got)
	}
}
