package configs_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/projector-dev/projector/internal/harness/testtool"
)

// ruleTests is the part of a promtool unit-test file that coverage needs.
type ruleTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		AlertRuleTest []struct {
			EvalTime  string `yaml:"eval_time"`
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

// alertCoverage returns the alerts of rules that alerts.test.yaml never
// expects to fire, and those it never expects to stay silent.
func alertCoverage(rules alertRules, tests ruleTests) (neverFires, neverSilent []string) {
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue // a recording rule
			}
			if !fires[r.Alert] {
				neverFires = append(neverFires, r.Alert)
			}
			if !silent[r.Alert] {
				neverSilent = append(neverSilent, r.Alert)
			}
		}
	}
	return neverFires, neverSilent
}

// TestAlertRules checks alerts.yaml with promtool and runs its unit tests
// (alerts.test.yaml), after checking that they cover every alert both
// firing and not firing.
func TestAlertRules(t *testing.T) {
	raw, err := os.ReadFile("alerts.test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var tests ruleTests
	if err := yaml.Unmarshal(raw, &tests); err != nil {
		t.Fatalf("alerts.test.yaml: %v", err)
	}
	if len(tests.RuleFiles) != 1 || tests.RuleFiles[0] != "alerts.yaml" {
		t.Fatalf("alerts.test.yaml tests rule files %v, want [alerts.yaml]", tests.RuleFiles)
	}
	rules := loadAlerts(t)
	neverFires, neverSilent := alertCoverage(rules, tests)
	if len(neverFires) > 0 {
		t.Errorf("alerts.test.yaml has no case where these alerts fire: %s", strings.Join(neverFires, ", "))
	}
	if len(neverSilent) > 0 {
		t.Errorf("alerts.test.yaml has no case where these alerts stay silent: %s", strings.Join(neverSilent, ", "))
	}

	promtool := testtool.Require(t, "promtool", "prometheus")
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts.test.yaml"}} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		} else if !strings.Contains(string(out), "SUCCESS") {
			t.Errorf("promtool %s did not report SUCCESS:\n%s", strings.Join(args, " "), out)
		}
	}
}

// TestAlertCoverageCheck feeds the coverage check an alert without tests
// and one tested only firing: both must be reported.
func TestAlertCoverageCheck(t *testing.T) {
	var rules alertRules
	if err := yaml.Unmarshal([]byte(`groups:
  - name: g
    rules:
      - {alert: Tested, expr: "up == 0"}
      - {alert: OnlyFires, expr: "up == 0"}
      - {alert: Untested, expr: "up == 0"}
      - {record: "job:up:sum", expr: "sum(up)"}
`), &rules); err != nil {
		t.Fatal(err)
	}
	var tests ruleTests
	if err := yaml.Unmarshal([]byte(`rule_files: [alerts.yaml]
tests:
  - alert_rule_test:
      - {eval_time: 1m, alertname: Tested, exp_alerts: []}
      - {eval_time: 5m, alertname: Tested, exp_alerts: [{exp_labels: {a: b}}]}
      - {eval_time: 5m, alertname: OnlyFires, exp_alerts: [{exp_labels: {a: b}}]}
`), &tests); err != nil {
		t.Fatal(err)
	}
	neverFires, neverSilent := alertCoverage(rules, tests)
	if strings.Join(neverFires, ",") != "Untested" || strings.Join(neverSilent, ",") != "OnlyFires,Untested" {
		t.Fatalf("never fires %v, never silent %v; want [Untested] and [OnlyFires Untested]", neverFires, neverSilent)
	}
}
