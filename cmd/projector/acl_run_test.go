package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/projector-dev/projector/internal/app/ingress"
	"github.com/projector-dev/projector/internal/app/wiring"
	"github.com/projector-dev/projector/internal/harness/testkit"
	"github.com/projector-dev/projector/processor"
	"github.com/projector-dev/projector/sideeffects/effect"
)

// aclGranted runs each role with exactly its list until it does its real
// work. The processor and the executor keep running (under TestKafkaACLs's
// cleanup) for the ingress and the operator commands that follow.
func aclGranted(t *testing.T, e *aclEnv) {
	live := liveNames()
	grantee := func(role string) string { return e.config(t, live, e.principal(t, role, roleGrants(role, live))) }
	top := t // the live worker outlives its subtest
	t.Run("processor", func(t *testing.T) {
		p := e.startApp(top, grantee("processor"), wiring.RoleProcessor)
		st := p.a.Processor.Stats()
		waitWorking(t, p, "8 events applied, 2 held, 1 dead-lettered", func() bool {
			return st.Outcome(processor.OutcomeApplied) >= 8 && st.Outcome(processor.OutcomeHeld) >= 2 && st.Outcome(processor.OutcomeInvalid) >= 1
		})
		t.Logf("applied %d, held %d, invalid %d", st.Outcome(processor.OutcomeApplied), st.Outcome(processor.OutcomeHeld), st.Outcome(processor.OutcomeInvalid))
	})
	t.Run("executor", func(t *testing.T) {
		x := e.startApp(top, grantee("executor"), wiring.RoleExecutor)
		waitWorking(t, x, "a webhook call made and two unknown outcomes parked", func() bool {
			if e.calls("notify:A-1:v2") == 0 || e.calls("notify:U-1:v2") == 0 || e.calls("notify:U-2:v2") == 0 {
				return false
			}
			l := e.ledger(t)
			return l["notify:A-1:v2"].Status == effect.Succeeded && l["notify:U-1:v2"].Status == effect.Unknown &&
				l["notify:U-2:v2"].Status == effect.Unknown
		})
		t.Logf("webhook calls: A-1 %d, U-1 %d, U-2 %d", e.calls("notify:A-1:v2"), e.calls("notify:U-1:v2"), e.calls("notify:U-2:v2"))
	})
	t.Run("ingress", func(t *testing.T) {
		s, done := e.startIngress(t, grantee("ingress"))
		select {
		case <-s.Listening():
		case err := <-done:
			t.Fatalf("ingress: %v", err)
		}
		req, err := http.NewRequest("POST", "http://"+s.Addr().String()+"/v1/events",
			strings.NewReader(`{"eventType":"CaseOpened","aggregateId":"I-1","aggregateVersion":1,"payload":{"v":1}}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(ingress.HeaderKey, "acl-ingress-1")
		req.Header.Set("Content-Type", "application/json")
		testkit.Await(t, time.Minute, "the ingress to be ready", func() bool { ok, _ := s.Ready(); return ok })
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST: %s, want 201 Created", resp.Status)
		}
		t.Logf("POST /v1/events: %s", resp.Status)
	})
	for _, c := range aclCommands(live) {
		t.Run(c.role, func(t *testing.T) {
			code, out, errOut := runCmd(c.run, append(c.args, "--config", grantee(c.role))...)
			if code != 0 || !strings.Contains(out, c.want) {
				t.Fatalf("exit %d, want 0 and %q in the output\nstdout: %s\nstderr: %s", code, c.want, out, errOut)
			}
			t.Logf("%s", firstLine(out))
		})
	}
}

// aclCommand is an operator command as the ACL test runs it: its function,
// arguments (without --config) and what its output shows once it worked.
type aclCommand struct {
	role string
	run  func(context.Context, []string, io.Writer, io.Writer) error
	args []string
	want string
}

// aclCommands are the operator commands, in the order the live state
// allows (gaps list before the skip, the rebuild before the diff of its
// topic). The removal runs use the aggregate and key the granted runs leave
// alone (G-1, U-2), so they would change something if they did not fail.
func aclCommands(n aclNames) []aclCommand {
	return []aclCommand{
		{"gaps list", runGaps, []string{"list"}, "G-1"},
		{"inspect", runInspect, []string{"G-1"}, "G-1"},
		{"gaps skip", runGaps, []string{"skip", "G-2", "--note", "acl test"}, "applied"},
		{"effects list", runEffects, []string{"list"}, "notify:A-1:v2"},
		{"effects show", runEffects, []string{"show", "notify:A-1:v2"}, "succeeded"},
		{"effects resolve", runEffects, []string{"resolve", "notify:U-1:v2", "--as", "succeeded"}, "resolved as succeeded"},
		{"rebuild", runRebuild, []string{"--projection", "overview", "--topic", n.target, "--progress", "none"}, "complete"},
		{"diff", runDiff, []string{"--topic", n.diffA, "--topic", n.diffB}, "diff A=" + n.diffA},
	}
}

// removalArgs are a command's arguments in a removal run with names n.
func removalArgs(role string, n aclNames) []string {
	switch role {
	case "gaps skip":
		return []string{"skip", "G-1", "--note", "must not be sent"}
	case "effects resolve":
		return []string{"resolve", "notify:U-2:v2", "--as", "failed"}
	}
	for _, c := range aclCommands(n) {
		if c.role == role {
			return c.args
		}
	}
	panic("no command " + role)
}

// aclRunExpectingFailure runs role as user with names n, expecting it to
// fail, and returns its error.
func aclRunExpectingFailure(t *testing.T, e *aclEnv, role string, n aclNames, user string) error {
	cfg := e.config(t, n, user)
	switch role {
	case "processor":
		p := e.startApp(t, cfg, wiring.RoleProcessor)
		return p.failure(t, func() bool { return p.a.Processor.Stats().Outcome(processor.OutcomeApplied) > 0 })
	case "executor":
		x := e.startApp(t, cfg, wiring.RoleExecutor)
		return x.failure(t, func() bool { return false })
	case "ingress":
		s, done := e.startIngress(t, cfg)
		deadline := time.After(90 * time.Second)
		for {
			select {
			case err := <-done:
				done <- err
				return err
			case <-deadline:
				t.Fatal("the ingress still runs after 90s")
			case <-time.After(20 * time.Millisecond):
				if ok, _ := s.Ready(); ok {
					t.Fatal("the ingress became ready although a permission it needs is missing")
				}
			}
		}
	}
	for _, c := range aclCommands(n) {
		if c.role != role {
			continue
		}
		code, out, errOut := runCmd(c.run, append(removalArgs(role, n), "--config", cfg)...)
		if code != 1 {
			t.Fatalf("exit %d, want 1\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		return errors.New(lastLine(errOut)) // the command's error, after its log lines
	}
	panic("no role " + role)
}

// waitWorking waits until the app does its work, failing the test if it
// stops first.
func waitWorking(t *testing.T, r *runningApp, what string, worked func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !worked() {
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("stopped before %s: %v", what, err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}
