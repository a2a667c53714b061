// Tests of the deployment recipes: the Kubernetes manifests decode strictly
// as their kinds, and the command lines of the image, the StatefulSets and
// the systemd unit pass the real CLI's validation (`projector run --check`)
// with the shipped configuration.
package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8syaml "sigs.k8s.io/yaml"

	"github.com/projector-dev/projector/internal/harness/testkit"
)

var binary string

// TestMain builds the real binary: the command lines are checked by it.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "projector-deploy-")
	if err != nil {
		panic(err)
	}
	if binary, err = testkit.BuildProjector(context.Background(), dir); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// ServiceMonitor is the part of the Prometheus Operator's CRD
// (monitoring.coreos.com/v1) that the manifest uses. Its types are not
// imported: the operator's module pulls in far more than this needs. Fields
// the manifest does not use are left out, so a field the operator does not
// know fails just as a typo does.
type ServiceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector *struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector,omitempty"`
		Endpoints []struct {
			Port          string `json:"port,omitempty"`
			Path          string `json:"path,omitempty"`
			Scheme        string `json:"scheme,omitempty"`
			Interval      string `json:"interval,omitempty"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// kinds maps apiVersion/kind to a fresh typed object.
var kinds = map[string]func() any{
	"v1/ConfigMap":                            func() any { return &corev1.ConfigMap{} },
	"v1/Service":                              func() any { return &corev1.Service{} },
	"apps/v1/StatefulSet":                     func() any { return &appsv1.StatefulSet{} },
	"policy/v1/PodDisruptionBudget":           func() any { return &policyv1.PodDisruptionBudget{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &ServiceMonitor{} },
}

// decodeStrict decodes one manifest as its kind; unknown fields, a wrong
// type or an unknown kind are errors.
func decodeStrict(doc []byte) (any, error) {
	var tm metav1.TypeMeta
	if err := k8syaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	mk, ok := kinds[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return nil, fmt.Errorf("unknown kind %s/%s", tm.APIVersion, tm.Kind)
	}
	obj := mk()
	if err := k8syaml.UnmarshalStrict(doc, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return obj, nil
}

// manifests decodes every YAML file under kubernetes/, by path.
func manifests(t *testing.T) map[string]any {
	t.Helper()
	out := map[string]any{}
	err := filepath.WalkDir("kubernetes", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(raw, []byte("\n---")) {
			return fmt.Errorf("%s: one object per file, please (the tests and the docs address them by file)", path)
		}
		obj, err := decodeStrict(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		out[path] = obj
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestManifestsDecodeStrictly(t *testing.T) {
	got := map[string]string{}
	for path, obj := range manifests(t) {
		got[path] = fmt.Sprintf("%T", obj)
	}
	want := map[string]string{
		"kubernetes/configmap.yaml":                         "*v1.ConfigMap",
		"kubernetes/service.yaml":                           "*v1.Service",
		"kubernetes/statefulset.yaml":                       "*v1.StatefulSet",
		"kubernetes/poddisruptionbudget.yaml":               "*v1.PodDisruptionBudget",
		"kubernetes/servicemonitor.yaml":                    "*deploy_test.ServiceMonitor",
		"kubernetes/split-roles/processor-statefulset.yaml": "*v1.StatefulSet",
		"kubernetes/split-roles/executor-statefulset.yaml":  "*v1.StatefulSet",
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("%s: decoded as %q, want %s", p, got[p], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("manifests %v, want exactly %v", got, want)
	}
}

// TestStrictDecodeRejects proves the decoding is strict: each of these has
// one mistake a lenient decoder would accept.
func TestStrictDecodeRejects(t *testing.T) {
	sts, err := os.ReadFile("kubernetes/statefulset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sm, err := os.ReadFile("kubernetes/servicemonitor.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, doc := range map[string]string{
		"misspelt field":           strings.Replace(string(sts), "replicas: 3", "replica: 3", 1),
		"field in the wrong place": strings.Replace(string(sts), "  serviceName: projector", "  serviceName: projector\n  terminationGracePeriodSeconds: 60", 1),
		"wrong type":               strings.Replace(string(sts), "replicas: 3", "replicas: three", 1),
		"unknown kind":             strings.Replace(string(sts), "kind: StatefulSet", "kind: StatefullSet", 1),
		"ServiceMonitor typo":      strings.Replace(string(sm), "scrapeTimeout:", "scrapeTimout:", 1),
	} {
		if doc == string(sts) || doc == string(sm) {
			t.Fatalf("%s: the replacement did not apply", name)
		}
		if _, err := decodeStrict([]byte(doc)); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

// shippedConfig is the configuration the ConfigMap ships.
func shippedConfig(t *testing.T, ms map[string]any) (*corev1.ConfigMap, string) {
	t.Helper()
	cm := ms["kubernetes/configmap.yaml"].(*corev1.ConfigMap)
	cfg, ok := cm.Data["projector.yaml"]
	if !ok {
		t.Fatal("the ConfigMap has no projector.yaml")
	}
	return cm, cfg
}

// check runs `projector <args> --check` with the --config path mapped to a
// temporary copy of cfg and the environment env, and returns the summary.
func check(t *testing.T, args []string, cfg string, env map[string]string) (summary string, configPath string) {
	t.Helper()
	tmp := filepath.Join(t.TempDir(), "projector.yaml")
	if err := os.WriteFile(tmp, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	mapped := append([]string(nil), args...)
	for i, a := range mapped {
		if a == "--config" && i+1 < len(mapped) {
			configPath = mapped[i+1]
			mapped[i+1] = tmp
		}
	}
	if configPath == "" {
		t.Fatalf("command line %q has no --config", args)
	}
	if !containsArg(mapped, "--check") {
		mapped = append(mapped, "--check")
	}
	cmd := exec.Command(binary, mapped...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("projector %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, o.String(), e.String())
	}
	if !strings.HasPrefix(o.String(), "configuration OK: ") {
		t.Fatalf("projector %s --check printed %q", strings.Join(args, " "), o.String())
	}
	return o.String(), configPath
}

func containsArg(args []string, a string) bool {
	for _, x := range args {
		if x == a {
			return true
		}
	}
	return false
}

func summaryField(summary, key string) string {
	m := regexp.MustCompile(`\b` + regexp.QuoteMeta(key) + `=(\S*)`).FindStringSubmatch(summary)
	if m == nil {
		return ""
	}
	return m[1]
}

// TestStatefulSetCommandLines runs each StatefulSet's container command line
// through `projector run --check` with the ConfigMap's configuration and the
// pod's environment, then checks what ties the manifest to the config: the
// instance id is the pod name, state.dir lies on the claimed volume, the
// probes hit the port the config listens on, and SIGTERM has time.
func TestStatefulSetCommandLines(t *testing.T) {
	ms := manifests(t)
	cm, cfg := shippedConfig(t, ms)
	roles := map[string]bool{}
	for path, obj := range ms {
		sts, ok := obj.(*appsv1.StatefulSet)
		if !ok {
			continue
		}
		t.Run(path, func(t *testing.T) {
			pod := sts.Spec.Template.Spec
			if len(pod.Containers) != 1 {
				t.Fatalf("%d containers, want 1", len(pod.Containers))
			}
			c := pod.Containers[0]
			podName := sts.Name + "-0"
			env := map[string]string{}
			for _, e := range c.Env {
				switch {
				case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
					env[e.Name] = podName
				case e.ValueFrom == nil:
					env[e.Name] = e.Value
				default:
					t.Fatalf("env %s: only literal values and metadata.name are simulated", e.Name)
				}
			}
			args := append(append([]string(nil), c.Command...), c.Args...)
			summary, cfgPath := check(t, args, cfg, env)
			if got := summaryField(summary, "instanceId"); got != podName {
				t.Errorf("instanceId %q, want the pod name %q", got, podName)
			}
			roles[summaryField(summary, "role")] = true

			mounts := map[string]corev1.VolumeMount{}
			for _, m := range c.VolumeMounts {
				mounts[m.Name] = m
			}
			// The config file comes from the ConfigMap volume.
			var cfgVol *corev1.Volume
			for i, v := range pod.Volumes {
				if v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
					cfgVol = &pod.Volumes[i]
				}
			}
			if cfgVol == nil || filepath.Join(mounts[cfgVol.Name].MountPath, "projector.yaml") != cfgPath {
				t.Errorf("--config %s is not projector.yaml of a mounted ConfigMap %s", cfgPath, cm.Name)
			}
			// state.dir is on a volumeClaimTemplate's mount.
			stateDir := summaryField(summary, "state.dir")
			onClaim := false
			for _, vct := range sts.Spec.VolumeClaimTemplates {
				if m, ok := mounts[vct.Name]; ok && strings.HasPrefix(stateDir+"/", strings.TrimSuffix(m.MountPath, "/")+"/") && !m.ReadOnly {
					onClaim = true
				}
			}
			if !onClaim {
				t.Errorf("state.dir %s is not on a writable volumeClaimTemplate mount %v", stateDir, c.VolumeMounts)
			}
			// Probes: /healthz and /readyz on the port http.listen binds.
			listen := summaryField(summary, "http.listen")
			if len(c.Ports) != 1 || !strings.HasSuffix(listen, fmt.Sprintf(":%d", c.Ports[0].ContainerPort)) || strings.HasPrefix(listen, "127.") {
				t.Errorf("container ports %v do not match http.listen %s (which must not be loopback)", c.Ports, listen)
			}
			for probe, want := range map[*corev1.Probe]string{c.LivenessProbe: "/healthz", c.ReadinessProbe: "/readyz"} {
				if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want || probe.HTTPGet.Port.String() != c.Ports[0].Name {
					t.Errorf("probe for %s: %+v", want, probe)
				}
			}
			if g := pod.TerminationGracePeriodSeconds; g == nil || *g < 30 {
				t.Errorf("terminationGracePeriodSeconds %v: SIGTERM needs the transaction and the 10s group leave", g)
			}
			if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
				t.Error("the pod does not require a non-root user")
			}
		})
	}
	for _, r := range []string{"all", "processor", "executor"} {
		if !roles[r] {
			t.Errorf("no StatefulSet runs --role %s (have %v)", r, roles)
		}
	}
}

// dockerfileFinal returns the final stage's ENTRYPOINT and CMD (exec form)
// and its USER and VOLUME lines.
func dockerfileFinal(t *testing.T) (entrypoint, cmd []string, user string, volumes []string, copied map[string]bool) {
	t.Helper()
	raw, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// Join continuation lines, drop comments.
	var lines []string
	cur := ""
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") || l == "" {
			continue
		}
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		lines = append(lines, cur+l)
		cur = ""
	}
	copied = map[string]bool{}
	execForm := func(instr, rest string) []string {
		var v []string
		if err := json.Unmarshal([]byte(rest), &v); err != nil {
			t.Fatalf("%s %s: not the exec (JSON) form, which signals need: %v", instr, rest, err)
		}
		return v
	}
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			entrypoint, cmd, user, volumes, copied = nil, nil, "", nil, map[string]bool{}
		case "ENTRYPOINT":
			entrypoint = execForm(instr, rest)
		case "CMD":
			cmd = execForm(instr, rest)
		case "USER":
			user = rest
		case "VOLUME":
			volumes = execForm(instr, rest)
		case "COPY":
			f := strings.Fields(rest)
			copied[f[len(f)-1]] = true
		}
	}
	return entrypoint, cmd, user, volumes, copied
}

// TestDockerfileCommandLine: the image runs the copied binary as a non-root
// user, declares the state volume, and its default command line passes
// `projector run --check` with the shipped configuration mounted where the
// CMD expects it.
func TestDockerfileCommandLine(t *testing.T) {
	entrypoint, cmd, user, volumes, copied := dockerfileFinal(t)
	if len(entrypoint) != 1 || !copied[entrypoint[0]] {
		t.Fatalf("ENTRYPOINT %q is not the binary the final stage copies (%v)", entrypoint, copied)
	}
	if user == "" || strings.HasPrefix(user, "0") || strings.HasPrefix(user, "root") {
		t.Errorf("USER %q: the image must run as non-root", user)
	}
	_, cfg := shippedConfig(t, manifests(t))
	summary, cfgPath := check(t, cmd, cfg, map[string]string{"PROJECTOR_INSTANCE_ID": "container-1"})
	if cfgPath != "/etc/projector/projector.yaml" {
		t.Errorf("CMD reads %s; the manifests and docs mount /etc/projector/projector.yaml", cfgPath)
	}
	stateDir := summaryField(summary, "state.dir")
	inVolume := false
	for _, v := range volumes {
		inVolume = inVolume || strings.HasPrefix(stateDir+"/", strings.TrimSuffix(v, "/")+"/")
	}
	if !inVolume {
		t.Errorf("state.dir %s of the shipped config is not in a VOLUME %v", stateDir, volumes)
	}
}

// TestSystemdUnit: ExecStartPre and ExecStart pass `projector run --check`
// with the shipped configuration, and the state directory systemd creates
// holds state.dir.
func TestSystemdUnit(t *testing.T) {
	raw, err := os.ReadFile("systemd/projector.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := map[string][]string{}
	for _, l := range strings.Split(string(raw), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			unit[k] = append(unit[k], v)
		}
	}
	_, cfg := shippedConfig(t, manifests(t))
	env := map[string]string{"PROJECTOR_INSTANCE_ID": "vm-1"}
	for _, key := range []string{"ExecStartPre", "ExecStart"} {
		if len(unit[key]) != 1 {
			t.Fatalf("%s: %d lines, want 1", key, len(unit[key]))
		}
		argv := strings.Fields(unit[key][0])
		if argv[0] != "/usr/local/bin/projector" {
			t.Errorf("%s runs %s, the docs install /usr/local/bin/projector", key, argv[0])
		}
		summary, _ := check(t, argv[1:], cfg, env)
		if dir := summaryField(summary, "state.dir"); unit["StateDirectory"] == nil || !strings.HasPrefix(dir, "/var/lib/"+unit["StateDirectory"][0]+"/") {
			t.Errorf("state.dir %s is not below StateDirectory=%v", dir, unit["StateDirectory"])
		}
	}
	if !containsArg(strings.Fields(unit["ExecStartPre"][0]), "--check") {
		t.Error("ExecStartPre does not validate with --check")
	}
	if unit["KillSignal"] == nil || unit["KillSignal"][0] != "SIGTERM" {
		t.Error("KillSignal is not SIGTERM")
	}
	if unit["RestartPreventExitStatus"] == nil || unit["RestartPreventExitStatus"][0] != "2" {
		t.Error("exit 2 (configuration error) should not be restarted in a loop")
	}
}

// TestBuildProfile: the profile the shipped builds name with -pgo (the
// Dockerfile and the systemd build in docs/operations.md) exists and is a CPU
// profile the Go toolchain reads, with the processor's path in it. A missing
// or unreadable profile fails only those builds, which nothing else here
// runs.
func TestBuildProfile(t *testing.T) {
	pgo := regexp.MustCompile(`-pgo=(\S+)`)
	named := map[string]bool{}
	for _, f := range []string{"Dockerfile", "../docs/operations.md"} {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ms := pgo.FindAllSubmatch(raw, -1)
		if len(ms) == 0 {
			t.Errorf("%s: no go build with -pgo", f)
		}
		for _, m := range ms {
			named[string(m[1])] = true
		}
	}
	for p := range named {
		out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=400", filepath.Join("..", p)).CombinedOutput()
		if err != nil {
			t.Errorf("-pgo=%s: go tool pprof cannot read it: %v\n%s", p, err, out)
			continue
		}
		if !strings.Contains(string(out), "projector/processor.(*Processor).process") {
			t.Errorf("-pgo=%s: not a profile of the processor's path (no processor.(*Processor).process in its top 400)", p)
		}
	}
}
