package wiring

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector-dev/projector/internal/app/broker"
	"github.com/projector-dev/projector/internal/app/config"
	"github.com/projector-dev/projector/processor"
)

// pki is a throw-away CA with a server and a client certificate, written as
// PEM files.
type pki struct {
	caFile, certFile, keyFile string
	server                    tls.Certificate
	pool                      *x509.CertPool
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "projector test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, server bool) ([]byte, *ecdsa.PrivateKey) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		if server {
			tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
			tmpl.DNSNames = []string{"localhost"}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		return der, key
	}
	p := &pki{pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	p.caFile = write("ca.pem", "CERTIFICATE", caDER)
	srvDER, srvKey := issue(2, "localhost", x509.ExtKeyUsageServerAuth, true)
	p.server = tls.Certificate{Certificate: [][]byte{srvDER}, PrivateKey: srvKey}
	cliDER, cliKey := issue(3, "projector", x509.ExtKeyUsageClientAuth, false)
	p.certFile = write("client.pem", "CERTIFICATE", cliDER)
	keyDER, err := x509.MarshalECPrivateKey(cliKey)
	if err != nil {
		t.Fatal(err)
	}
	p.keyFile = write("client.key", "EC PRIVATE KEY", keyDER)
	return p
}

// startSecureBroker starts kfake with TLS (client certificates required) and
// SASL/SCRAM-SHA-256 for admin/s3cret.
func startSecureBroker(t *testing.T, p *pki) *broker.Embedded {
	t.Helper()
	b, err := broker.Start(broker.Options{Listen: "127.0.0.1:0", Partitions: 2, Extra: []kfake.Opt{
		kfake.TLS(&tls.Config{
			Certificates: []tls.Certificate{p.server}, MinVersion: tls.VersionTLS12,
			ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: p.pool,
		}),
		kfake.EnableSASL(),
		kfake.Superuser("SCRAM-SHA-256", "admin", "s3cret"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

const secureConfig = `name: secure
kafka:
  brokers: [%s]
  instanceId: s1
  input: [events]
  sessionTimeout: 10s
  tls:
    enabled: true
    caFile: %s
    certFile: %s
    keyFile: %s
  sasl:
    mechanism: SCRAM-SHA-256
    username: admin
    password: ${KAFKA_PASSWORD}
state: {dir: %s}
http: {listen: "off"}
projections:
  - name: overview
    topic: overview.v1
    events: {CaseOpened: merge}
`

func secureConfigFor(t *testing.T, b *broker.Embedded, p *pki, env map[string]string) (*config.Config, error) {
	t.Helper()
	body := fmt.Sprintf(secureConfig, b.Addr(), p.caFile, p.certFile, p.keyFile, filepath.Join(t.TempDir(), "state"))
	return config.Parse([]byte(body), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
}

// TestTLSSASLSCRAM runs the processor against a broker that requires TLS
// with client certificates and SASL/SCRAM-SHA-256: with the right secret
// (from the environment) it processes events; with a wrong one Run fails
// promptly with an error that names the cause.
func TestTLSSASLSCRAM(t *testing.T) {
	p := newPKI(t)
	b := startSecureBroker(t, p)

	t.Run("right secret", func(t *testing.T) {
		cfg, err := secureConfigFor(t, b, p, map[string]string{"KAFKA_PASSWORD": "s3cret"})
		if err != nil {
			t.Fatal(err)
		}
		a, err := New(cfg, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()

		copts, err := ClientOpts(&cfg.Kafka)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.Addr()), kgo.AllowAutoTopicCreation()}, copts...)...)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		// A real cluster: the operator creates the input topic (the worker
		// creates inputs only on the embedded broker).
		if _, err := kadm.NewClient(cl).CreateTopic(ctx, 2, -1, nil, "events"); err != nil {
			t.Fatalf("create the input over TLS+SASL: %v", err)
		}
		const n = 5
		for i := 1; i <= n; i++ {
			v := fmt.Sprintf(`{"eventId":"e%d","eventType":"CaseOpened","aggregateId":"CASE-%d","aggregateVersion":1,"payload":{"n":%d}}`, i, i, i)
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "events", Key: fmt.Appendf(nil, "CASE-%d", i), Value: []byte(v)}).FirstErr(); err != nil {
				t.Fatalf("produce over TLS+SASL: %v", err)
			}
		}
		for a.Processor.Stats().Events("overview", processor.OutcomeApplied) < n {
			select {
			case err := <-done:
				t.Fatalf("processor stopped: %v", err)
			case <-ctx.Done():
				t.Fatalf("applied %d of %d events", a.Processor.Stats().Events("overview", processor.OutcomeApplied), n)
			case <-time.After(50 * time.Millisecond):
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
	})

	t.Run("wrong secret", func(t *testing.T) {
		cfg, err := secureConfigFor(t, b, p, map[string]string{"KAFKA_PASSWORD": "wrong"})
		if err != nil {
			t.Fatal(err)
		}
		a, err := New(cfg, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		start := time.Now()
		err = a.Run(ctx)
		took := time.Since(start)
		t.Logf("Run returned after %s: %v", took.Round(time.Millisecond), err)
		if err == nil {
			t.Fatal("Run succeeded with a wrong password")
		}
		if took > 20*time.Second {
			t.Errorf("Run took %s to fail; want under 20s", took)
		}
		if msg := strings.ToLower(err.Error()); !strings.Contains(msg, "sasl") || !strings.Contains(msg, "authentication") {
			t.Errorf("error does not name the cause (SASL authentication): %v", err)
		}
	})

	t.Run("secret not set", func(t *testing.T) {
		_, err := secureConfigFor(t, b, p, nil)
		var ce *config.Error
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "kafka.sasl.password") || !strings.Contains(err.Error(), "KAFKA_PASSWORD") {
			t.Fatalf("err %v: want a config error naming kafka.sasl.password and KAFKA_PASSWORD", err)
		}
	})
}
