package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/internal/harness/testtool"
)

// kcatConfig is a worker against an external broker (the `projector broker`
// process), one projection, dead letters on events.dlq.
const kcatConfig = `name: interop
kafka:
  brokers: [%s]
  instanceId: interop-1
  input: [events]
  deadLetterTopic: events.dlq
state: {dir: %q}
http: {listen: "off"}
projections:
  - name: overview
    topic: overview.v1
    events: {CaseOpened: merge, CaseEscalated: merge}
`

// TestKcatInterop drives `projector broker` and `projector run` with a
// librdkafka client (Debian's kcat) on both sides: kcat creates the input
// topic by producing to it (auto-creation), the worker processes it, and
// kcat reads the projection read_committed and the dead letters with their
// headers. One partition keeps offsets, and so the expected records, exact.
func TestKcatInterop(t *testing.T) {
	kcat := testtool.Require(t, "kcat", "kcat")
	dir := t.TempDir()

	// The real `projector broker` command on a real TCP port.
	bcmd := exec.Command(binary, "broker", "--dir", filepath.Join(dir, "broker"), "--listen", "127.0.0.1:0", "--partitions", "1")
	bout, err := bcmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var berr bytes.Buffer
	bcmd.Stderr = &syncWriter{b: &berr}
	if err := bcmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bcmd.Process.Kill(); _ = bcmd.Wait() })
	line, err := bufio.NewReader(bout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "listening on ") {
		t.Fatalf("broker did not report its address: %q, %v; stderr %s", line, err, berr.String())
	}
	addr := strings.TrimSpace(strings.TrimPrefix(line, "listening on "))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kcatRun := func(stdin string, args ...string) string {
		t.Helper()
		// broker.address.family=v4: the broker listens on 127.0.0.1 only,
		// and librdkafka would otherwise also try "localhost" over IPv6.
		all := append([]string{"-b", addr, "-X", "broker.address.family=v4"}, args...)
		c := exec.CommandContext(ctx, kcat, all...)
		c.Stdin = strings.NewReader(stdin)
		var o, e bytes.Buffer
		c.Stdout, c.Stderr = &o, &e
		if err := c.Run(); err != nil {
			t.Fatalf("kcat %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, o.String(), e.String())
		}
		return o.String()
	}

	// Key and value separated by '|'; one record per line, in this order
	// (offsets 0…6 of events/0).
	records := []string{
		`CASE-1|{"eventId":"e1","eventType":"CaseOpened","aggregateId":"CASE-1","aggregateVersion":1,"payload":{"status":"OPEN","owner":"ana"}}`,
		// An exact duplicate.
		`CASE-1|{"eventId":"e1","eventType":"CaseOpened","aggregateId":"CASE-1","aggregateVersion":1,"payload":{"status":"OPEN","owner":"ana"}}`,
		// The same event re-serialised: other key order and spacing.
		`CASE-1|{ "payload": { "owner": "ana", "status": "OPEN" }, "aggregateVersion": 1, "aggregateId": "CASE-1", "eventType": "CaseOpened", "eventId": "e1" }`,
		`CASE-1|{"eventId":"e2","eventType":"CaseEscalated","aggregateId":"CASE-1","aggregateVersion":2,"payload":{"status":"ESCALATED"}}`,
		// A conflict: e2 again with another payload.
		`CASE-1|{"eventId":"e2","eventType":"CaseEscalated","aggregateId":"CASE-1","aggregateVersion":2,"payload":{"status":"CLOSED"}}`,
		// Poison: not JSON.
		`CASE-9|this is not JSON`,
		`CASE-2|{"eventId":"e3","eventType":"CaseOpened","aggregateId":"CASE-2","aggregateVersion":1,"payload":{"status":"OPEN"}}`,
	}
	kcatRun(strings.Join(records, "\n")+"\n", "-P", "-t", "events", "-K", "|")

	cfg := writeConfig(t, fmt.Sprintf(kcatConfig, addr, filepath.Join(dir, "state")))
	wcmd, _ := startWorker(t, "run", "--config", cfg)
	if err := testkit.WaitCaughtUp(ctx, []string{addr}, "interop", "events"); err != nil {
		t.Fatalf("worker did not catch up: %v\n%s", err, wcmd.Stderr.(*syncWriter).String())
	}
	if err := wcmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := waitExit(t, wcmd, 30*time.Second); code != 0 {
		t.Fatalf("worker exit %d: %s", code, wcmd.Stderr.(*syncWriter).String())
	}

	proj := kcatRun("", "-C", "-t", "overview.v1", "-o", "beginning", "-e", "-q",
		"-X", "isolation.level=read_committed", "-f", "%k %s\n")
	wantProj := `CASE-1 {"projection":"overview","aggregateId":"CASE-1","version":1,"state":{"owner":"ana","status":"OPEN"},"lastEventId":"e1","lastEventType":"CaseOpened"}
CASE-1 {"projection":"overview","aggregateId":"CASE-1","version":2,"state":{"owner":"ana","status":"ESCALATED"},"lastEventId":"e2","lastEventType":"CaseEscalated"}
CASE-2 {"projection":"overview","aggregateId":"CASE-2","version":1,"state":{"status":"OPEN"},"lastEventId":"e3","lastEventType":"CaseOpened"}
`
	if !sameByKey(proj, wantProj, " ") {
		t.Errorf("projection topic (read_committed):\n%s\nwant (per key, in this order):\n%s", proj, wantProj)
	}

	dlq := kcatRun("", "-C", "-t", "events.dlq", "-o", "beginning", "-e", "-q",
		"-X", "isolation.level=read_committed", "-f", "%k|%s|%h\n")
	wantDLQ := `CASE-1|{"eventId":"e2","eventType":"CaseEscalated","aggregateId":"CASE-1","aggregateVersion":2,"payload":{"status":"CLOSED"}}|projector-reason=conflict,projector-error=event "e2" was seen before with a different fingerprint,projector-source=events/0/4
CASE-9|this is not JSON|projector-reason=invalid:value,projector-error=envelope: invalid value: not JSON: invalid literal at offset 0,projector-source=events/0/5
`
	if !sameByKey(dlq, wantDLQ, "|") {
		t.Errorf("dead-letter topic:\n%s\nwant (per key, in this order):\n%s", dlq, wantDLQ)
	}
}

// sameByKey compares kcat's output lines (key, sep, rest) key by key, in
// order within each key. The worker creates its output topics with several
// partitions, and kcat interleaves partitions as their fetches come back:
// only the order of one key's records (one partition's) is defined.
func sameByKey(got, want, sep string) bool {
	byKey := func(s string) map[string][]string {
		m := map[string][]string{}
		for _, l := range strings.Split(strings.TrimSuffix(s, "\n"), "\n") {
			k, _, _ := strings.Cut(l, sep)
			m[k] = append(m[k], l)
		}
		return m
	}
	return reflect.DeepEqual(byKey(got), byKey(want))
}
