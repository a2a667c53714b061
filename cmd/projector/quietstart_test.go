package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/harness/testkit"
)

// TestHealthyStartLogsNoWarning: `projector run` on the embedded broker, with
// a side effect configured (so the executor and its lag run too), becomes
// ready, has its lag refreshed and stops on SIGTERM without a single WARN or
// ERROR line. Topics that do not exist yet at the first lag refresh and a
// group that has not joined are the normal start, not warnings.
func TestHealthyStartLogsNoWarning(t *testing.T) {
	dir := t.TempDir()
	listen := freeAddr(t)
	body := fmt.Sprintf(runConfig, filepath.Join(dir, "broker"), filepath.Join(dir, "state"))
	body = strings.Replace(body, `http: {listen: "off"}`, fmt.Sprintf("http: {listen: %q}", listen), 1)
	body += `sideEffects:
  - name: notify
    on: [CaseEscalated]
    key: "notify:{aggregateId}:v{aggregateVersion}"
    webhook: {url: "http://127.0.0.1:9/notify", timeout: 1s}
`
	cmd, _ := startWorker(t, "run", "--config", writeConfig(t, body))
	if err := testkit.WaitFor(context.Background(), time.Minute, func() bool {
		ready := false
		if resp, err := http.Get("http://" + listen + "/readyz"); err == nil {
			ready = resp.StatusCode == http.StatusOK
			resp.Body.Close()
		}
		var metrics []byte
		if resp, err := http.Get("http://" + listen + "/metrics"); err == nil {
			metrics, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		// Ready, and a lag refresh has seen the assigned partitions.
		return ready && strings.Contains(string(metrics), "projector_consumer_lag{partition=\"0\",topic=\"events\"}")
	}); err != nil {
		t.Fatalf("not ready with lag within a minute:\n%s", cmd.Stderr.(*syncWriter).String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, cmd, 30*time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	logs := cmd.Stderr.(*syncWriter).String()
	if strings.Contains(logs, "level=WARN") || strings.Contains(logs, "level=ERROR") {
		t.Errorf("a healthy start logged a warning or an error:\n%s", logs)
	}
	if !strings.Contains(logs, "stopped cleanly") {
		t.Errorf("no clean stop logged:\n%s", logs)
	}
}
