package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// TestAlertRules: promtool accepts the rules and their unit tests pass
// (each alert fires on the series that should fire it, and not before).
// promtool comes with Debian's prometheus package, which scripts/test.sh
// installs when missing.
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: apt-get install -y prometheus (scripts/test.sh does so as root)")
	}
	for _, args := range [][]string{{"check", "rules", "sqlease-alerts.yml"}, {"test", "rules", "sqlease-alerts.test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestAlertRulesUseExportedSeries: every sqlease_ series the rules (and
// their unit tests) name is one a real node exports — a renamed metric
// would otherwise leave an alert silently empty. The node runs a job and a
// singleton so that their labelled series exist.
func TestAlertRulesUseExportedSeries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts sqlease")
	}
	exported := scrape(t)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	b, err := os.ReadFile("prometheus/sqlease-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile("prometheus/sqlease-alerts.test.yml")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`sqlease_[a-z_]+`)
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			for _, m := range name.FindAllString(r.Expr, -1) {
				n++
				if !exported[m] {
					t.Errorf("alert %s uses %s, which a node does not export (it exports %v)", r.Alert, m, slices.Sorted(maps.Keys(exported)))
				}
			}
		}
	}
	for _, m := range name.FindAllString(string(tests), -1) {
		if !exported[m] && !strings.HasPrefix(m, "sqlease_alerts") {
			t.Errorf("the rules' unit tests feed %s, which a node does not export", m)
		}
	}
	if n < 7 {
		t.Fatalf("found %d series in the rules: the parse is broken", n)
	}
}

// scrape builds sqlease, starts a node on SQLite with a job that runs and a
// singleton, and returns the metric names its /metrics exports.
func scrape(t *testing.T) map[string]bool {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "sqlease")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/sqlease/sqlease/cmd/sqlease").CombinedOutput(); err != nil {
		t.Fatalf("building sqlease: %v\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--db", "sqlite:"+filepath.Join(dir, "db"), "--http", addr, "--lease-duration", "2s", "--renew-interval", "500ms")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	base := "http://" + addr
	post := func(path, body string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode/100 == 2 {
					return
				}
				t.Fatalf("POST %s: %s: %s", path, resp.Status, b)
			}
			if time.Now().After(deadline) {
				t.Fatalf("POST %s: %v\n%s", path, err, stderr.String())
			}
		}
	}
	post("/v1/jobs", `{"name":"once","schedule":{},"action":{"exec":{"command":["true"]}}}`)
	post("/v1/singletons", `{"name":"idle","command":["sleep","60"],"heartbeat":"10s","stop_timeout":"1s"}`)
	want := []string{"sqlease_job_runs_total", "sqlease_singleton_stale", "sqlease_is_leader"}
	var names map[string]bool
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		names = map[string]bool{}
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "sqlease_") {
				n := strings.FieldsFunc(line, func(r rune) bool { return r == '{' || r == ' ' })[0]
				names[n] = true
				for _, suffix := range []string{"_bucket", "_sum", "_count"} { // a histogram's own name
					if base, ok := strings.CutSuffix(n, suffix); ok {
						names[base] = true
					}
				}
			}
		}
		resp.Body.Close()
		ok := true
		for _, w := range want {
			ok = ok && names[w]
		}
		if ok {
			return names
		}
	}
	t.Fatalf("the node did not export %v within 30s; it exports %v\n%s", want, slices.Sorted(maps.Keys(names)), stderr.String())
	return nil
}

// TestSystemdUnit: systemd-analyze verify accepts the unit (with ExecStart
// pointing at a real binary); the hardening options are there.
func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile("systemd/sqlease.service")
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{"ExecStart=/usr/local/bin/sqlease serve", "DynamicUser=yes", "StateDirectory=sqlease",
		"NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "CapabilityBoundingSet=\n",
		"RestrictAddressFamilies=", "SystemCallFilter=@system-service", "MemoryDenyWriteExecute=yes", "Restart=always", "KillSignal=SIGTERM"} {
		if !strings.Contains(unit, want) {
			t.Errorf("the unit lacks %q", strings.TrimSpace(want))
		}
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze not found: the unit's keys were checked, not its syntax")
		return
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "sqlease")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "sqlease.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(unit, "/usr/local/bin/sqlease", bin)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	var problems []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.Contains(line, "sqlease.service") {
			problems = append(problems, line)
		}
	}
	if err != nil || len(problems) > 0 {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestKubernetesManifests: the manifests parse, and say what the kit
// promises: three replicas, /healthz liveness and /readyz readiness, the
// database URL and API token from a Secret, a non-root read-only container,
// and a PodDisruptionBudget over the same pods.
func TestKubernetesManifests(t *testing.T) {
	f, err := os.Open("kubernetes/sqlease.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	docs := map[string]map[string]any{}
	for {
		var d map[string]any
		if err := dec.Decode(&d); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		docs[fmt.Sprint(d["kind"])] = d
	}
	get := func(v any, path ...any) any {
		for _, p := range path {
			switch p := p.(type) {
			case string:
				m, _ := v.(map[string]any)
				v = m[p]
			case int:
				s, _ := v.([]any)
				if p >= len(s) {
					return nil
				}
				v = s[p]
			}
		}
		return v
	}
	dep := docs["Deployment"]
	if dep == nil || docs["PodDisruptionBudget"] == nil || docs["Service"] == nil {
		t.Fatalf("want a Deployment, a PodDisruptionBudget and a Service, got %v", slices.Sorted(func(yield func(string) bool) {
			for k := range docs {
				if !yield(k) {
					return
				}
			}
		}))
	}
	c := get(dep, "spec", "template", "spec", "containers", 0)
	checks := []struct {
		what      string
		got, want any
	}{
		{"replicas", get(dep, "spec", "replicas"), 3},
		{"liveness probe", get(c, "livenessProbe", "httpGet", "path"), "/healthz"},
		{"readiness probe", get(c, "readinessProbe", "httpGet", "path"), "/readyz"},
		{"first argument", get(c, "args", 0), "serve"},
		{"runAsNonRoot", get(dep, "spec", "template", "spec", "securityContext", "runAsNonRoot"), true},
		{"readOnlyRootFilesystem", get(c, "securityContext", "readOnlyRootFilesystem"), true},
		{"allowPrivilegeEscalation", get(c, "securityContext", "allowPrivilegeEscalation"), false},
		{"PDB selector", get(docs["PodDisruptionBudget"], "spec", "selector", "matchLabels", "app.kubernetes.io/name"), "sqlease"},
		{"PDB maxUnavailable", get(docs["PodDisruptionBudget"], "spec", "maxUnavailable"), 1},
	}
	for _, ch := range checks {
		if fmt.Sprint(ch.got) != fmt.Sprint(ch.want) {
			t.Errorf("%s: %v, want %v", ch.what, ch.got, ch.want)
		}
	}
	secrets := map[string]string{}
	for i := 0; get(c, "env", i) != nil; i++ {
		e := get(c, "env", i)
		if ref := get(e, "valueFrom", "secretKeyRef", "key"); ref != nil {
			secrets[fmt.Sprint(get(e, "name"))] = fmt.Sprint(ref)
		}
	}
	if secrets["SQLEASE_DB"] == "" || secrets["SQLEASE_API_TOKEN"] == "" {
		t.Errorf("the database URL and the API token must come from a Secret; from Secrets: %v", secrets)
	}
}

// TestAzureKit: the Azure SQL scripts keep the defaults the seed asks for
// (resource group cristp-reltaskexec in westus2, a mandatory subscription
// id), Entra ID-only authentication, the identity's contained user and the
// DSN of the README; and their brackets balance (no PowerShell here to
// parse them: see deploy/azure/README.md).
func TestAzureKit(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("azure", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	create, remove := read("New-SqleaseAzureSql.ps1"), read("Remove-SqleaseAzureSql.ps1")
	for _, want := range []string{"[Parameter(Mandatory)] [string] $SubscriptionId", "$ResourceGroup = 'cristp-reltaskexec'",
		"$Location = 'westus2'", "-EnableActiveDirectoryOnlyAuthentication", "New-AzUserAssignedIdentity",
		"New-AzSqlServerFirewallRule", "FROM EXTERNAL PROVIDER", "fedauth=ActiveDirectoryDefault", "--migrate=false"} {
		if !strings.Contains(create, want) {
			t.Errorf("New-SqleaseAzureSql.ps1 lacks %q", want)
		}
	}
	for _, want := range []string{"[Parameter(Mandatory)] [string] $SubscriptionId", "$ResourceGroup = 'cristp-reltaskexec'", "Remove-AzResourceGroup"} {
		if !strings.Contains(remove, want) {
			t.Errorf("Remove-SqleaseAzureSql.ps1 lacks %q", want)
		}
	}
	for name, src := range map[string]string{"New": create, "Remove": remove} {
		for _, pair := range []string{"()", "{}", "[]"} {
			if o, c := strings.Count(src, pair[:1]), strings.Count(src, pair[1:]); o != c {
				t.Errorf("%s-SqleaseAzureSql.ps1: %d %q but %d %q", name, o, pair[:1], c, pair[1:])
			}
		}
	}
}
