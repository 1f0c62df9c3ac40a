package cli_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// The configuration is observed without starting a node where possible: a
// cross-field rule that fails (renew_interval < lease_duration, positive
// intervals) prints the values that won, and NewNode checks it before
// opening the database.

// TestPrecedenceDurations checks flag > environment > config file >
// default for several duration fields.
func TestPrecedenceDurations(t *testing.T) {
	db, path := sqliteURL(t)
	for _, f := range []struct {
		key   string   // config-file key; flag and env derive from it
		fixed []string // flags that make the rule fail and print the value
		vals  [3]string
		def   string // the default as printed; "" if it passes the rule
		msg   string // the message, with %s for the value that won
	}{
		{"lease_duration", []string{"--renew-interval", "10m"}, [3]string{"3s", "4s", "5s"}, "6s", "must be shorter than lease_duration (%s)"},
		{"renew_interval", []string{"--lease-duration", "100ms"}, [3]string{"2s", "3s", "4s"}, "2s", "renew_interval (%s) must be shorter than lease_duration (100ms)"},
		{"acquire_interval", nil, [3]string{"-1s", "-2s", "-3s"}, "", "acquire_interval must be positive, got %s"},
		{"poll_interval", nil, [3]string{"-1s", "-2s", "-3s"}, "", "poll_interval must be positive, got %s"},
		{"schedule_refresh_interval", nil, [3]string{"-1s", "-2s", "-3s"}, "", "schedule_refresh_interval must be positive, got %s"},
		{"shutdown_timeout", nil, [3]string{"-1s", "-2s", "-3s"}, "", "shutdown_timeout must be positive, got %s"},
	} {
		flag := "--" + strings.ReplaceAll(f.key, "_", "-")
		envName := "SQLEASE_" + strings.ToUpper(f.key)
		file := writeFile(t, f.key+".yaml", f.key+": "+f.vals[0]+"\n")
		cases := []struct {
			name string
			env  map[string]string
			args []string
			want string
		}{
			{"flag beats env and file", map[string]string{"SQLEASE_CONFIG": file, envName: f.vals[1]}, []string{flag, f.vals[2]}, f.vals[2]},
			{"flag beats env", map[string]string{envName: f.vals[1]}, []string{flag, f.vals[2]}, f.vals[2]},
			{"flag beats file", nil, []string{"--config", file, flag, f.vals[2]}, f.vals[2]},
			{"env beats file", map[string]string{"SQLEASE_CONFIG": file, envName: f.vals[1]}, nil, f.vals[1]},
			{"file beats default", map[string]string{"SQLEASE_CONFIG": file}, nil, f.vals[0]},
			{"default", nil, nil, f.def},
		}
		for _, c := range cases {
			if c.want == "" {
				continue // the default passes the rule: nothing to see
			}
			t.Run(f.key+"/"+c.name, func(t *testing.T) {
				args := append(append([]string{"serve", "--db", db}, f.fixed...), c.args...)
				run(t, c.env, "", args...).usage(t, f.key, strings.Replace(f.msg, "%s", c.want, 1))
			})
		}
	}
	if _, err := os.Stat(path); err == nil {
		t.Errorf("an invalid configuration created the database %s", path)
	}
}

// TestConfigFileChoice checks that --config beats SQLEASE_CONFIG.
func TestConfigFileChoice(t *testing.T) {
	db, _ := sqliteURL(t)
	a := writeFile(t, "a.yaml", "lease_duration: 3s\n")
	b := writeFile(t, "b.yaml", "lease_duration: 4s\n")
	env := map[string]string{"SQLEASE_CONFIG": a}
	run(t, env, "", "serve", "--db", db, "--renew-interval", "1m").usage(t, "lease_duration (3s)")
	run(t, env, "", "serve", "--db", db, "--renew-interval", "1m", "--config", b).usage(t, "lease_duration (4s)")
	// YAML scalars of other types are taken as their text.
	c := writeFile(t, "c.yaml", "lease_duration: 1s\nrenew_interval: 1s\nmigrate: false\nlog_level: debug\n")
	run(t, nil, "", "serve", "--db", db, "--config", c).usage(t, "renew_interval (1s) must be shorter than lease_duration (1s)")
}

// TestConfigErrors checks each source's errors: exit 2, one line naming
// the field, the source and the rule.
func TestConfigErrors(t *testing.T) {
	db, path := sqliteURL(t)
	for _, tc := range []struct {
		name string
		file string // config file content; "" for none
		env  map[string]string
		args []string
		want []string
	}{
		{"unknown key", "lease_duration: 1s\nleese_duration: 2s\n", nil, nil, []string{"leese_duration", "unknown key"}},
		{"dashed key", "lease-duration: 1s\n", nil, nil, []string{"lease-duration", "unknown key"}},
		{"flag-only key", "config: other.yaml\n", nil, nil, []string{"config", "unknown key"}},
		{"nested value", "lease_duration:\n  seconds: 5\n", nil, nil, []string{"lease_duration", "string, number or boolean"}},
		{"list value", "dispatch: [leader]\n", nil, nil, []string{"dispatch", "string, number or boolean"}},
		{"not YAML", "lease_duration: [1s\n", nil, nil, []string{"config", "YAML"}},
		{"not a mapping", "- 1\n- 2\n", nil, nil, []string{"config", "YAML"}},
		{"bad duration in file", "lease_duration: soon\n", nil, nil, []string{"lease_duration", "config file", "soon"}},
		{"number as duration in file", "renew_interval: 5\n", nil, nil, []string{"renew_interval", "config file", `"5"`}},
		{"bad duration in env", "", map[string]string{"SQLEASE_RENEW_INTERVAL": "soon"}, nil, []string{"renew_interval", "environment SQLEASE_RENEW_INTERVAL", "soon"}},
		{"bad duration in flag", "", nil, []string{"--acquire-interval", "soon"}, []string{"acquire_interval", "flag --acquire-interval", "soon"}},
		{"bad dispatch in file", "dispatch: broadcast\n", nil, nil, []string{"dispatch", "config file", "broadcast"}},
		{"bad dispatch in env", "", map[string]string{"SQLEASE_DISPATCH": "broadcast"}, nil, []string{"dispatch", "environment SQLEASE_DISPATCH", "broadcast"}},
		{"bad dispatch in flag", "", nil, []string{"--dispatch", "broadcast"}, []string{"dispatch", "flag --dispatch", "broadcast"}},
		{"renew >= lease across sources", "lease_duration: 2s\n", map[string]string{"SQLEASE_RENEW_INTERVAL": "5s"}, nil, []string{"renew_interval (5s)", "lease_duration (2s)", "shorter"}},
		{"renew >= lease in file", "lease_duration: 2s\nrenew_interval: 5s\n", nil, nil, []string{"renew_interval (5s)", "lease_duration (2s)", "shorter"}},
		{"renew >= lease in env", "", map[string]string{"SQLEASE_LEASE_DURATION": "2s", "SQLEASE_RENEW_INTERVAL": "2s"}, nil, []string{"renew_interval (2s)", "lease_duration (2s)"}},
		{"advertise URL without scheme", "", nil, []string{"--advertise-url", "10.0.0.5:8080"}, []string{"advertise_url", "a URL such as http://"}},
		{"advertise URL of another scheme", "", nil, []string{"--advertise-url", "ftp://node-1"}, []string{"advertise_url", "http:// or https://"}},
		{"advertise URL with a path", "advertise_url: http://node-1:8080/api\n", nil, nil, []string{"advertise_url", "without a path"}},
		{"advertise URL with credentials", "", map[string]string{"SQLEASE_ADVERTISE_URL": "http://u:secret@node-1"}, nil, []string{"advertise_url", "credentials"}},
		{"advertise URL without host", "", nil, []string{"--advertise-url", "http://:8080"}, []string{"advertise_url", "must name a host"}},
		{"missing config file (flag)", "", nil, []string{"--config", "/nonexistent/sqlease.yaml"}, []string{"config", "/nonexistent/sqlease.yaml"}},
		{"missing config file (env)", "", map[string]string{"SQLEASE_CONFIG": "/nonexistent/sqlease.yaml"}, nil, []string{"config", "/nonexistent/sqlease.yaml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"serve", "--db", db}, tc.args...)
			if tc.file != "" {
				args = append(args, "--config", writeFile(t, "sqlease.yaml", tc.file))
			}
			run(t, tc.env, "", args...).usage(t, tc.want...)
		})
	}
	if _, err := os.Stat(path); err == nil {
		t.Errorf("an invalid configuration created the database %s", path)
	}
}

// TestPrecedenceServe starts a real node in-process whose settings come
// from all three sources and checks which won, through its HTTP API, its
// log and its database.
func TestPrecedenceServe(t *testing.T) {
	fileDB, filePath := sqliteURL(t)
	envDB, envPath := sqliteURL(t)
	fileAddr, envAddr := freeAddr(t), freeAddr(t)
	cfg := writeFile(t, "sqlease.yaml", strings.Join([]string{
		"db: " + fileDB,
		"http: " + fileAddr,
		"holder_id: file-holder",
		"lease_name: file-lease",
		"log_format: text",
		"log_level: info",
		"lease_duration: 1s",
		"renew_interval: 250ms",
		"acquire_interval: 100ms",
		"api_token: file-token-0123456789",
	}, "\n")+"\n")
	env := map[string]string{
		"SQLEASE_CONFIG":     cfg,
		"SQLEASE_DB":         envDB,
		"SQLEASE_HTTP":       envAddr,
		"SQLEASE_HOLDER_ID":  "env-holder",
		"SQLEASE_LOG_FORMAT": "json",
		"SQLEASE_API_TOKEN":  "env-token-0123456789",
	}
	log, stop := startServe(t, envAddr, env, "--holder-id", "flag-holder", "--api-token", "flag-token-0123456789")

	// holder: flag > env > file; http, db, log format: env > file;
	// lease name: file > default.
	rz := readyz(t, envAddr)
	if rz["mode"] != "leader" || rz["holder_id"] != "flag-holder" || rz["lease_epoch"] != "1" {
		t.Errorf("/readyz: %v", rz)
	}
	if _, code := get(fileAddr, "/readyz"); code != 0 {
		t.Errorf("the config file's http address %s answers too", fileAddr)
	}
	req, _ := http.NewRequest("GET", "http://"+envAddr+"/v1/leases", nil)
	req.Header.Set("Authorization", "Bearer flag-token-0123456789") // reads need the token too
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body := string(raw)
	var leases struct {
		Leases []struct {
			Name, Holder string
			Epoch        int64
		} `json:"leases"`
	}
	if err := json.Unmarshal([]byte(body), &leases); err != nil || len(leases.Leases) != 1 ||
		leases.Leases[0].Name != "file-lease" || leases.Leases[0].Holder != "flag-holder" {
		t.Errorf("/v1/leases: %s (%v)", body, err)
	}
	// api token: flag > env > file.
	for token, want := range map[string]int{"flag-token-0123456789": 201, "env-token-0123456789": 401, "file-token-0123456789": 401} {
		req, _ := http.NewRequest("POST", "http://"+envAddr+"/v1/jobs",
			strings.NewReader(`{"name": "j-`+token+`", "schedule": {"every": "1h"}, "action": {"exec": {"command": ["true"]}}}`))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("POST /v1/jobs with token %s: %d, want %d", token, resp.StatusCode, want)
		}
	}

	// status on the environment's database shows the running node's lease.
	st := run(t, nil, "", "status", "--db", envDB).ok(t)
	for _, want := range []string{"file-lease", "flag-holder", "jobs: 1 total"} {
		if !strings.Contains(st.stdout, want) {
			t.Errorf("status does not show %q: %v", want, st)
		}
	}
	if strings.Contains(st.stdout, "expired") {
		t.Errorf("status shows the running node's lease expired: %v", st)
	}

	res := stop()
	if res.code != 0 {
		t.Errorf("serve after its context ended: %v", res)
	}
	// The log is JSON (env > file) and names the winning db and address.
	var sawStart, sawStop bool
	for _, line := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("log line is not JSON: %q", line)
			continue
		}
		switch rec["msg"] {
		case "node_started":
			sawStart = true
			if rec["db"] != envDB || rec["http"] != envAddr || rec["holder_id"] != "flag-holder" {
				t.Errorf("node_started: %v", rec)
			}
		case "node_stopped":
			sawStop = true
		}
	}
	if !sawStart || !sawStop {
		t.Errorf("log lacks node_started or node_stopped:\n%s", log.String())
	}
	if _, err := os.Stat(envPath); err != nil {
		t.Errorf("the environment's database was not used: %v", err)
	}
	if _, err := os.Stat(filePath); err == nil {
		t.Errorf("the config file's database %s was opened though the environment's wins", filePath)
	}
	// The stopped node released its lease.
	st = run(t, nil, "", "status", "--db", envDB).ok(t)
	if !strings.Contains(st.stdout, "expired") {
		t.Errorf("after a graceful stop the lease should be released (expired): %v", st)
	}
}
