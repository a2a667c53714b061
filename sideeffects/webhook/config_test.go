package webhook

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/projector-dev/projector/sideeffects/effect"
	"github.com/projector-dev/projector/sideeffects/sideeffectstest"
)

// TestConfigNeverPrintsSecret: a Config printed the ways a program prints
// its settings (fmt verbs, slog text and JSON, encoding/json) shows
// [redacted], never the secret.
func TestConfigNeverPrintsSecret(t *testing.T) {
	sec := newSecret(t)
	c := Config{URL: "http://h/x", Timeout: time.Second, SigningSecret: SigningSecrets{sec}}
	body := strings.TrimPrefix(string(sec), SigningSecretPrefix)
	var outs []string
	for _, f := range []string{"%v", "%+v", "%#v", "%s", "%q"} {
		outs = append(outs, fmt.Sprintf(f, c), fmt.Sprintf(f, sec))
	}
	j, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("x", "webhook", c, "secret", sec)
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "webhook", c, "secret", sec)
	outs = append(outs, string(j), buf.String())
	for _, o := range outs {
		if strings.Contains(o, body) {
			t.Errorf("printed: %s", o)
		}
	}
	if !strings.Contains(string(j), `"[redacted]"`) {
		t.Errorf("JSON %s does not show [redacted]", j)
	}
}

// TestSecretRefusedNeverSent: a secret that is not whsec_ + base64 of a 24
// to 64 byte key (a Config no configuration validated) makes every call fail
// with the reason, never the value, and nothing is sent unsigned.
func TestSecretRefusedNeverSent(t *testing.T) {
	srv, got := capture(t)
	in := sideeffectstest.Intent(t, "k", "fx", "p")
	for _, s := range []SigningSecret{"shhh-not-a-whsec", "whsec_%%%", "whsec_" + "c2hvcnQ="} {
		res := New(Config{URL: srv.URL, Timeout: longTimeout, SigningSecret: SigningSecrets{s}}).Call(context.Background(), in, in.Value)
		if res.Outcome != effect.OutcomeFailed || res.Err == nil || strings.Contains(res.Err.Error(), strings.TrimPrefix(string(s), SigningSecretPrefix)) {
			t.Errorf("secret %d bytes: %v %v", len(s), res.Outcome, res.Err)
		}
	}
	if reqs := got(); len(reqs) != 0 { // Call returns after the answer: none came
		t.Fatalf("%d calls were sent", len(reqs))
	}
}
