package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"
	"gopkg.in/yaml.v3"

	"github.com/projector-dev/projector/internal/app/broker"
	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/workload"
	"github.com/projector-dev/projector/processor"
	sideeffect "github.com/projector-dev/projector/sideeffects/effect"
)

const opsConfig = `name: ops-test
kafka:
  brokers: embedded
  embeddedBroker: {listen: %q, dir: %q, partitions: 2}
  instanceId: t1
  input: [events]
state: {dir: %q}
http: {listen: "off"}
gaps: {holdTimeout: 1h, onTimeout: wait}
projections:
  - name: overview
    topic: overview.v1
    events: {CaseOpened: merge, CaseUpdated: merge, CaseClosed: delete}
  - name: audit
    topic: audit.v1
    aggregateTypes: [AuditedCase]
    events: {CaseOpened: merge}
`

func opsEvent(id, typ, agg string, v int, payload string) workload.Record {
	return workload.Record{Key: []byte(agg), Value: fmt.Appendf(nil,
		`{"eventId":%q,"eventType":%q,"aggregateId":%q,"aggregateType":"RegulatoryCase","aggregateVersion":%d,"payload":%s}`,
		id, typ, agg, v, payload)}
}

// freeAddr returns a loopback address with a port free at the time of the call.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// worker is an in-process `projector run` on the embedded broker.
type worker struct {
	app  *wiring.App
	stop context.CancelFunc
	done chan error
}

func startOpsWorker(t *testing.T, cfgPath string) *worker {
	t.Helper()
	cfg, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	a, err := wiring.New(cfg, wiring.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &worker{app: a, stop: cancel, done: make(chan error, 1)}
	go func() { w.done <- a.Run(ctx) }()
	t.Cleanup(w.close)
	return w
}

func (w *worker) close() {
	if w.stop == nil {
		return
	}
	w.stop()
	<-w.done
	w.app.Close()
	w.stop = nil
}

// runCmd runs a command function as main does and returns its exit code and output.
func runCmd(fn func(context.Context, []string, io.Writer, io.Writer) error, args ...string) (int, string, string) {
	var o, e bytes.Buffer
	err := fn(context.Background(), args, &o, &e)
	code := report(err, &e)
	return code, o.String(), e.String()
}

// projectionVersions reads a projection topic: the versions emitted per key.
func projectionVersions(t *testing.T, brokers []string, topic string) map[string][]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs, err := testkit.ReadAll(ctx, brokers, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]int64{}
	for _, r := range recs {
		var v testkit.ProjectionValue
		if r.Value != nil && json.Unmarshal(r.Value, &v) == nil {
			out[string(r.Key)] = append(out[string(r.Key)], v.Version)
		}
	}
	return out
}

// TestGapsInspectSkip runs a worker on events with gaps, then lists the
// gaps, inspects aggregates, skips a gap against the running worker (the
// held events are applied and reach the projection topic) and against a
// stopped one (the command is queued and applied when the worker runs).
func TestGapsInspectSkip(t *testing.T) {
	dir := t.TempDir()
	addr := freeAddr(t)
	cfgPath := writeConfig(t, fmt.Sprintf(opsConfig, addr, filepath.Join(dir, "broker"), filepath.Join(dir, "state")))
	w := startOpsWorker(t, cfgPath)
	brokers := w.app.Brokers
	ctx := context.Background()
	if err := testkit.CreateTopic(ctx, brokers, "events", 2); err != nil {
		t.Fatal(err)
	}
	recs := []workload.Record{
		opsEvent("e1-1", "CaseOpened", "CASE-1", 1, `{"status":"OPEN"}`),
		opsEvent("e1-2", "CaseUpdated", "CASE-1", 2, `{"owner":"ana"}`),
		opsEvent("e4-1", "CaseOpened", "CASE-4", 1, `{"status":"OPEN"}`),
		opsEvent("e4-3", "CaseUpdated", "CASE-4", 3, `{"owner":"dee"}`),
		opsEvent("e4-5", "CaseUpdated", "CASE-4", 5, `{"status":"REVIEW"}`),
		opsEvent("e7-2", "CaseUpdated", "CASE-7", 2, `{"owner":"eve"}`),
	}
	if err := testkit.Produce(ctx, brokers, "events", recs); err != nil {
		t.Fatal(err)
	}
	st := w.app.Processor.Stats()
	testkit.Await(t, time.Minute, "3 held events", func() bool { return st.Events("overview", processor.OutcomeHeld) >= 3 })

	// gaps list against the running worker.
	code, out, errOut := runCmd(runGaps, "list", "--config", cfgPath)
	if code != 0 {
		t.Fatalf("gaps list: exit %d: %s", code, errOut)
	}
	t.Logf("gaps list:\n%s", out)
	for _, re := range []string{
		`(?m)^overview\s+CASE-4\s+events/\d\s+1\s+3,5\s+2,4\s+\S+Z\s+\d+s`,
		`(?m)^overview\s+CASE-7\s+events/\d\s+0\s+2\s+1\s`,
		`2 aggregate\(s\) with held events`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("gaps list output does not match %s", re)
		}
	}
	if strings.Contains(out, "CASE-1") {
		t.Errorf("gaps list shows CASE-1, which holds nothing")
	}
	code, out, _ = runCmd(runGaps, "list", "--config", cfgPath, "--json")
	if code != 0 {
		t.Fatalf("gaps list --json: exit %d", code)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("gaps list --json: want 2 lines, got %q", out)
	}
	var g struct {
		Projection, Aggregate string
		Version               int64
		Held                  []struct{ Version int64 }
		Missing               []string
	}
	if err := json.Unmarshal([]byte(lines[0]), &g); err != nil {
		t.Fatal(err)
	}
	if g.Aggregate != "CASE-4" || g.Version != 1 || len(g.Held) != 2 || strings.Join(g.Missing, ",") != "2,4" {
		t.Errorf("gaps list --json: %s", lines[0])
	}

	// inspect.
	code, out, errOut = runCmd(runInspect, "CASE-4", "--config", cfgPath)
	if code != 0 {
		t.Fatalf("inspect: exit %d: %s", code, errOut)
	}
	t.Logf("inspect CASE-4:\n%s", out)
	for _, re := range []string{
		`overview / CASE-4  \(partition events/\d\)`,
		`version    1\n`, `deleted    false`, `state      \{"status":"OPEN"\}`,
		`held       2 event\(s\), missing version\(s\) 2,4, gap open since`,
		`(?m)^\s+3\s+e4-3\s+CaseUpdated\s+\S+Z\s+\d+$`,
		`(?m)^\s+5\s+e4-5\s+CaseUpdated\s+\S+Z\s+\d+$`,
		`audit / CASE-4: no state`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("inspect output does not match %s", re)
		}
	}
	code, out, _ = runCmd(runInspect, "CASE-1", "--config", cfgPath, "--projection", "overview")
	if code != 0 || !strings.Contains(out, "version    2") || !strings.Contains(out, `{"owner":"ana","status":"OPEN"}`) ||
		!strings.Contains(out, "held       none") || strings.Contains(out, "audit") {
		t.Errorf("inspect CASE-1: exit %d:\n%s", code, out)
	}
	code, _, errOut = runCmd(runInspect, "CASE-404", "--config", cfgPath)
	if code != 1 || !strings.Contains(errOut, "CASE-404 has no state") {
		t.Errorf("inspect of an unknown aggregate: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = runCmd(runInspect, "CASE-1", "--config", cfgPath, "--projection", "nope")
	if code != 2 || !strings.Contains(errOut, "--projection") {
		t.Errorf("inspect --projection nope: exit %d, stderr %q", code, errOut)
	}

	// gaps skip against the running worker: v3 is applied, v5 still waits for v4.
	code, out, errOut = runCmd(runGaps, "skip", "CASE-4", "--config", cfgPath, "--note", "v2 lost upstream")
	t.Logf("gaps skip CASE-4:\n%s%s", out, errOut)
	if code != 0 || !regexp.MustCompile(`applied: overview CASE-4 on events/\d: version 1 -> 3, 1 event\(s\) still held \(missing 4\)`).MatchString(out) {
		t.Fatalf("gaps skip CASE-4: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCmd(runGaps, "skip", "CASE-4", "--config", cfgPath, "--projection", "overview")
	if code != 0 || !strings.Contains(out, "version 3 -> 5, 0 event(s) still held") {
		t.Fatalf("second gaps skip CASE-4: exit %d\n%s%s", code, out, errOut)
	}
	if v := projectionVersions(t, brokers, "overview.v1")["CASE-4"]; fmt.Sprint(v) != "[1 3 5]" {
		t.Errorf("CASE-4 versions on overview.v1: %v, want [1 3 5]", v)
	}
	code, _, errOut = runCmd(runGaps, "skip", "CASE-1", "--config", cfgPath)
	if code != 1 || !strings.Contains(errOut, "CASE-1 holds no events") {
		t.Errorf("gaps skip of an aggregate without a gap: exit %d, stderr %q", code, errOut)
	}

	// A stopped worker: the tools start the embedded broker from its directory.
	w.close()
	code, out, errOut = runCmd(runGaps, "list", "--config", cfgPath)
	if code != 0 || !strings.Contains(out, "CASE-7") || strings.Contains(out, "CASE-4") {
		t.Fatalf("gaps list with the worker stopped: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = runCmd(runGaps, "skip", "CASE-7", "--config", cfgPath)
	t.Logf("gaps skip CASE-7 (worker stopped):\n%s%s", out, errOut)
	if code != 0 || !strings.Contains(out, "command is queued and will be applied when the processor runs") {
		t.Fatalf("gaps skip with the worker stopped: exit %d\n%s%s", code, out, errOut)
	}
	w = startOpsWorker(t, cfgPath)
	testkit.Await(t, time.Minute, "CASE-7 v2 on overview.v1", func() bool {
		return fmt.Sprint(projectionVersions(t, w.app.Brokers, "overview.v1")["CASE-7"]) == "[2]"
	})
	code, out, _ = runCmd(runGaps, "list", "--config", cfgPath)
	if code != 0 || !strings.Contains(out, "no held events") {
		t.Errorf("gaps list after every skip: exit %d\n%s", code, out)
	}
}

// TestOpsHelpAndUsage: every operator command and subcommand has --help
// with an example (exit 0); bad usage and configuration exit 2 naming the
// flag or key.
func TestOpsHelpAndUsage(t *testing.T) {
	for _, tc := range []struct {
		fn   func(context.Context, []string, io.Writer, io.Writer) error
		args []string
	}{
		{runGaps, []string{"--help"}},
		{runGaps, []string{"list", "--help"}},
		{runGaps, []string{"skip", "--help"}},
		{runGaps, []string{"skip", "CASE-1", "-h"}},
		{runInspect, []string{"--help"}},
	} {
		var o, e bytes.Buffer
		err := tc.fn(context.Background(), tc.args, &o, &e)
		if !errors.Is(err, pflag.ErrHelp) || report(err, &e) != 0 || !strings.Contains(o.String(), "Example:\n  projector ") {
			t.Errorf("%v: err %v, stdout %q", tc.args, err, o.String())
		}
		for _, flag := range []string{"--config", "--projection"} {
			if !strings.Contains(o.String(), flag) && tc.args[0] != "--help" {
				t.Errorf("%v: help does not list %s", tc.args, flag)
			}
		}
	}
	bad := writeConfig(t, "name: x\nkafka:\n  brokers: embedded\n  input: [in]\ngaps: {holdTimeout: soon}\nprojections:\n  - {name: p, topic: p.v1, events: {A: merge}}\n")
	for _, tc := range []struct {
		fn   func(context.Context, []string, io.Writer, io.Writer) error
		args []string
		want string
	}{
		{runGaps, nil, "subcommand"},
		{runGaps, []string{"frob"}, `unknown subcommand "frob"`},
		{runGaps, []string{"list"}, "--config is required"},
		{runGaps, []string{"list", "--config", bad}, "gaps.holdTimeout"},
		{runGaps, []string{"skip", "--config", bad}, "want the aggregate id"},
		{runGaps, []string{"skip", "A", "--config", bad}, "gaps.holdTimeout"},
		{runGaps, []string{"skip", "A", "B", "--config", bad}, `unexpected argument "B"`},
		{runGaps, []string{"list", "--bogus"}, "unknown flag: --bogus"},
		{runInspect, nil, "want the aggregate id"},
		{runInspect, []string{"A", "--config", bad}, "gaps.holdTimeout"},
		{runInspect, []string{"A", "--config", bad, "--log-format", "xml"}, "--log-format"},
		{runEffects, []string{"resolve", "K", "--as", "succeeded", "--note", strings.Repeat("n", sideeffect.MaxNoteBytes+1), "--config", bad}, "--note: at most 1024 bytes, got 1025"},
	} {
		code, _, errOut := runCmd(tc.fn, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 naming %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestAlertRules checks configs/alerts.yaml: a well-formed Prometheus rule
// file whose every rule has alert, expr, for, labels.severity and
// annotations.summary, covering the contract's operator signals.
func TestAlertRules(t *testing.T) {
	data, err := os.ReadFile("../../configs/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatal(err)
	}
	if len(f.Groups) == 0 {
		t.Fatal("no rule groups")
	}
	var exprs []string
	names := map[string]bool{}
	for _, g := range f.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: needs a name and rules", g.Name)
		}
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.For == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %q: needs alert, expr, for, labels.severity and annotations.summary", r.Alert)
			}
			if _, err := time.ParseDuration(r.For); err != nil {
				t.Errorf("rule %q: for %q: %v", r.Alert, r.For, err)
			}
			if names[r.Alert] {
				t.Errorf("rule %q defined twice", r.Alert)
			}
			names[r.Alert] = true
			if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") {
				t.Errorf("rule %q: unbalanced parentheses in %q", r.Alert, r.Expr)
			}
			exprs = append(exprs, r.Expr)
		}
	}
	all := strings.Join(exprs, "\n")
	for _, m := range []string{"projector_gaps_open", "projector_gap_oldest_seconds", `projector_side_effects_total{status="unknown"`,
		"projector_consumer_lag", `projector_transactions_total{result="aborted"}`, "projector_deadletter_total"} {
		if !strings.Contains(all, m) {
			t.Errorf("no alert uses %s", m)
		}
	}
}

// testPKI writes a throw-away CA and a server certificate for 127.0.0.1 and
// returns the CA file and the server's TLS configuration.
func testPKI(t *testing.T) (caFile string, server *tls.Config) {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	now := time.Now()
	caKey, srvKey := key(), key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	srvDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{SerialNumber: big.NewInt(2),
		Subject: pkix.Name{CommonName: "broker"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}}}
}

const secureRunConfig = `name: secure-cli
kafka:
  brokers: [%s]
  instanceId: s1
  input: [events]
  tls: {enabled: true, caFile: %q}
  sasl: {mechanism: SCRAM-SHA-512, username: projector, password: "${KAFKA_PASSWORD}"}
state: {dir: %q}
http: {listen: %q}
projections:
  - name: overview
    topic: overview.v1
    events: {CaseOpened: merge}
`

// TestRunTLSSASLBinary runs the real binary against a broker that requires
// TLS and SASL/SCRAM-SHA-512, the secret coming from the environment: with
// the right secret the worker runs and stops cleanly (exit 0); with a wrong
// one it exits 1 promptly and stderr names the cause; the operator commands
// name it too.
func TestRunTLSSASLBinary(t *testing.T) {
	caFile, srvTLS := testPKI(t)
	b, err := broker.Start(broker.Options{Listen: "127.0.0.1:0", Extra: []kfake.Opt{
		kfake.TLS(srvTLS), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "projector", "s3cret"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	httpAddr := freeAddr(t)
	cfgPath := writeConfig(t, fmt.Sprintf(secureRunConfig, b.Addr(), caFile, filepath.Join(t.TempDir(), "state"), httpAddr))

	t.Run("right secret", func(t *testing.T) {
		t.Setenv("KAFKA_PASSWORD", "s3cret")
		// A real cluster: the operator creates the input topic (the worker
		// creates inputs only on the embedded broker).
		createSecureTopic(t, b.Addr(), caFile, "events")
		cmd, stderr := startWorker(t, "run", "--config", cfgPath)
		// Ready: it has joined the group and holds its partitions, so
		// every handshake (TLS, SASL) went through.
		testkit.Await(t, time.Minute, "the worker to be ready over TLS+SASL", func() bool {
			code, _ := httpGet(httpAddr, "/readyz")
			return code == http.StatusOK
		})
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := waitExit(t, cmd, 30*time.Second); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		code, out, errOut := runCmd(runGaps, "list", "--config", cfgPath)
		if code != 0 || !strings.Contains(out, "no held events") {
			t.Errorf("gaps list over TLS+SASL: exit %d\n%s%s", code, out, errOut)
		}
	})

	t.Run("wrong secret", func(t *testing.T) {
		t.Setenv("KAFKA_PASSWORD", "wrong")
		start := time.Now()
		r := runBinary(t, time.Minute, "run", "--config", cfgPath)
		t.Logf("exit %d after %s; stderr tail: %s", r.code, time.Since(start).Round(time.Millisecond), lastLine(r.stderr))
		if r.code != 1 {
			t.Errorf("exit %d, want 1", r.code)
		}
		if time.Since(start) > 20*time.Second {
			t.Errorf("took %s to fail; want under 20s", time.Since(start))
		}
		if l := strings.ToLower(lastLine(r.stderr)); !strings.Contains(l, "sasl authentication failed") {
			t.Errorf("the error does not name the cause (SASL authentication failed): %q", lastLine(r.stderr))
		}
		code, _, errOut := runCmd(runGaps, "list", "--config", cfgPath, "--timeout", "20s")
		if code != 1 || !strings.Contains(errOut, "SASL authentication failed") {
			t.Errorf("gaps list with a wrong secret: exit %d, stderr %q", code, errOut)
		}
	})

	t.Run("secret not set", func(t *testing.T) {
		os.Unsetenv("KAFKA_PASSWORD")
		r := runBinary(t, time.Minute, "run", "--config", cfgPath)
		if r.code != 2 || !strings.Contains(r.stderr, "kafka.sasl.password") || !strings.Contains(r.stderr, "KAFKA_PASSWORD") {
			t.Errorf("exit %d, stderr %q: want exit 2 naming kafka.sasl.password and KAFKA_PASSWORD", r.code, r.stderr)
		}
	})
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// createSecureTopic creates topic over TLS and SASL/SCRAM-SHA-512 as the
// operator of a real cluster would.
func createSecureTopic(t *testing.T, addr, caFile, topic string) {
	t.Helper()
	pemBytes, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemBytes)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.DialTLSConfig(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}),
		kgo.SASL(scram.Auth{User: "projector", Pass: "s3cret"}.AsSha512Mechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, nil, topic); err != nil {
		t.Fatalf("create %s over TLS+SASL: %v", topic, err)
	}
}
