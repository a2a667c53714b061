package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/harness/testkit"
)

// TestTwinInstanceIDExits: two `projector run` processes on one broker with
// kafka.instanceId left unset, so that both take the host name – two workers
// on one host. Each logs the WARN naming the defaulted id. The second one's
// start fences the first (its producer, and its static group membership):
// one of them exits 1 saying that another process is running with that
// instance id, with the group and the transactional id (the first, which
// was ready before the second started); the other keeps running and stops
// cleanly on SIGTERM. Before issue 22 neither warned, and
// the fenced one said only "fenced by another instance with the same
// transactional id".
func TestTwinInstanceIDExits(t *testing.T) {
	b, _ := testkit.Broker(t, 2, "events")
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := func(n int, listen string) string {
		body := fmt.Sprintf(runConfig, filepath.Join(dir, "broker"), filepath.Join(dir, fmt.Sprintf("state%d", n)))
		for _, r := range [][2]string{{"  instanceId: t1\n", ""}, {`http: {listen: "off"}`, fmt.Sprintf("http: {listen: %q}", listen)}} {
			if !strings.Contains(body, r[0]) {
				t.Fatalf("runConfig no longer has %q: update this test", r[0])
			}
			body = strings.Replace(body, r[0], r[1], 1)
		}
		return writeConfig(t, body)
	}
	// The first is in the group before the second starts, so the second's
	// start is what fences it.
	http1 := freeAddr(t)
	w1, _ := startWorker(t, "run", "--config", config(1, http1), "--brokers", b.Addr())
	var code int
	var body string
	if err := testkit.WaitFor(context.Background(), time.Minute, func() bool {
		code, body = httpGet(http1, "/readyz")
		return code == 200
	}); err != nil {
		t.Fatalf("the first process is not ready a minute after its start: %d %s\n%s", code, body, stderrOf(w1))
	}
	w2, _ := startWorker(t, "run", "--config", config(2, freeAddr(t)), "--brokers", b.Addr())

	exited := make(chan *exec.Cmd, 2)
	for _, w := range []*exec.Cmd{w1, w2} {
		go func() {
			_ = w.Wait()
			exited <- w
		}()
	}
	var fenced, survivor *exec.Cmd
	select {
	case fenced = <-exited:
	case <-time.After(90 * time.Second):
		t.Fatalf("neither process exited within 90 s of the second start:\nfirst:\n%s\nsecond:\n%s", stderrOf(w1), stderrOf(w2))
	}
	survivor = w1
	if fenced == w1 {
		survivor = w2
	}
	name := map[*exec.Cmd]string{w1: "the first", w2: "the second"}
	logs := stderrOf(fenced)
	if code := fenced.ProcessState.ExitCode(); code != 1 {
		t.Errorf("%s process exited %d, want 1:\n%s", name[fenced], code, logs)
	}
	want := fmt.Sprintf("projector: eos: another process is running with instance id %s (group cli-test, transactional id cli-test-%s)", host, host)
	if n := strings.Count(logs, want); n != 1 {
		t.Errorf("%s process's output has %q %d times, want once:\n%s", name[fenced], want, n, logs)
	}
	warn := fmt.Sprintf(`level=WARN msg="kafka.instanceId is not set: using the host name as the instance id" instanceId=%s `, host)
	for _, w := range []*exec.Cmd{w1, w2} {
		if !strings.Contains(stderrOf(w), warn) {
			t.Errorf("%s process did not warn that its instance id is the host name (%q):\n%s", name[w], warn, stderrOf(w))
		}
	}

	// The other one runs on: it was not fenced in turn, and stops cleanly.
	if err := survivor.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s process did not exit within 30 s of SIGTERM:\n%s", name[survivor], stderrOf(survivor))
	}
	if code := survivor.ProcessState.ExitCode(); code != 0 || !strings.Contains(stderrOf(survivor), "stopped cleanly") {
		t.Errorf("%s process exited %d after SIGTERM, want 0 and a clean stop:\n%s", name[survivor], code, stderrOf(survivor))
	}
	t.Logf("%s process exited 1: %s", name[fenced], lastLine(logs))
}
