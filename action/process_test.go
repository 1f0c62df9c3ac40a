//go:build unix

package action

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/syncbuf"
)

// Issue 30 items 8 and 20: a singleton definition with invalid UTF-8 or
// NUL reached the database (PostgreSQL answered 503), member names were
// read in any case and twice, and nothing was bounded. Each is now a
// sqlease.ErrInvalidConfig naming the field.
func TestParseProcessSpecRefuses(t *testing.T) {
	many := func(n int, item string) string {
		return strings.TrimSuffix(strings.Repeat(item+",", n), ",")
	}
	manyEnv := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, `"V%d":"x",`, i)
		}
		return strings.TrimSuffix(b.String(), ",")
	}
	long := strings.Repeat("a", MaxProcessArgBytes+1)
	for _, c := range []struct{ raw, field string }{
		{"{\"name\":\"s\",\"command\":[\"true\"],\"initial_state\":{\"a\":\"\xff\"}}", "initial_state.a: invalid UTF-8"},
		{"{\"name\":\"s\",\"command\":[\"true\", \"\xc3\"]}", "command[1]: invalid UTF-8"},
		{"{\"name\":\"s\",\"command\":[\"true\"],\"env\":{\"A\":\"\xff\"}}", "env.A: invalid UTF-8"},
		{`{"name":"s","command":["true"],"env":{"A":"x\u0000y"}}`, "env.A: a string contains a NUL"},
		{`{"name":"s","command":["true"],"initial_state":{"k":"\u0000"}}`, "initial_state.k: a string contains a NUL"},
		{`{"name":"s","Command":["true"]}`, `Command: must be spelled "command"`},
		{`{"name":"s","command":["true"],"command":["rm"]}`, "command: appears twice"},
		{`{"name":"s","command":["true"],"env":{"DB_PASSWORD":"a","db_password":"b"}}`, "env.db_password: appears twice"},
		{`{"name":"s","command":["true"],"env":{"A":{"ENV":"SQLEASE_SECRET_A"}}}`, "env.A:"},
		{`{"name":"s","command":["true"],"env":{"A":{"env":"HOME"}}}`, "env.A:"},
		{`{"name":"s","command":["true"],"env":{"A":5}}`, "env.A:"},
		{`{"name":"s","command":[` + many(MaxProcessArgs+1, `"a"`) + `]}`, "command: 257 arguments"},
		{`{"name":"s","command":["true","` + long + `"]}`, "command[1]: 16385 bytes"},
		{`{"name":"s","command":["true",` + many(5, `"`+long[:MaxProcessArgBytes-1]+`"`) + `]}`, "command: 81919 bytes in all"},
		{`{"name":"s","command":["true"],"env":{` + manyEnv(MaxProcessEnv+1) + `}}`, "env: 257 variables"},
		{`{"name":"s","command":["true"],"env":{"A":"` + long + `"}}`, "env.A: 16385 bytes"},
		{`{"name":"s","command":["true"],"env":{"` + long[:300] + `":"x"}}`, "env: a variable name of 300 bytes"},
		{`{"name":"s","command":["true"],"heartbeat":"0s"}`, "heartbeat: must be in"},
		{`{"name":"s","command":["true"],"initial_state":` + `"` + strings.Repeat("x", MaxProcessSpecBytes) + `"}`, "singleton: 262"},
	} {
		_, err := ParseProcessSpec([]byte(c.raw))
		if err == nil || !errors.Is(err, sqlease.ErrInvalidConfig) || !strings.Contains(err.Error(), c.field) {
			msg := c.raw
			if len(msg) > 120 {
				msg = msg[:120] + "…"
			}
			t.Errorf("ParseProcessSpec(%s) = %v, want an invalid-config error with %q", msg, err, c.field)
		}
	}
}

// Issue 30 item 21: a singleton's variables may reference secrets, which
// are stored and shown as the reference and resolved when the process
// starts; literal values under secret-looking names are shown as ***.
// Definitions stored before (plain strings) still parse, to the same JSON.
func TestProcessEnvReferencesAndRedaction(t *testing.T) {
	const stored = `{"name":"ingest","command":["sh","-c","echo hi","--password=pw-in-arg","postgres://u:pw-in-url@db/x"],"env":{"API_TOKEN":"tok-literal","PLAIN":"visible"},"initial_state":null,"heartbeat":"30s","stop_timeout":"10s"}`
	p, err := ParseProcessSpec([]byte(stored))
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := json.Marshal(p); string(again) != stored {
		t.Errorf("a stored definition re-encodes as\n%s\nnot\n%s", again, stored)
	}
	p, err = ParseProcessSpec([]byte(`{"name":"ingest","command":["true"],"env":{"DB_PASSWORD":{"env":"SQLEASE_SECRET_DB"},"KEY_FILE":{"file":"k"},"API_TOKEN":"tok-literal","PLAIN":"visible"}}`))
	if err != nil {
		t.Fatal(err)
	}
	canon, _ := json.Marshal(p)
	if want := `"env":{"API_TOKEN":"tok-literal","DB_PASSWORD":{"env":"SQLEASE_SECRET_DB"},"KEY_FILE":{"file":"k"},"PLAIN":"visible"}`; !strings.Contains(string(canon), want) {
		t.Errorf("stored as %s", canon)
	}
	shown, _ := json.Marshal(RedactProcess(p))
	if want := `"env":{"API_TOKEN":"***","DB_PASSWORD":{"env":"SQLEASE_SECRET_DB"},"KEY_FILE":{"file":"k"},"PLAIN":"visible"}`; !strings.Contains(string(shown), want) {
		t.Errorf("shown as %s", shown)
	}
	if p.Env["API_TOKEN"].Value != "tok-literal" {
		t.Error("RedactProcess changed its argument")
	}
	q, _ := ParseProcessSpec([]byte(stored))
	if c := RedactProcess(q).Command; strings.Join(c, " ") != "sh -c echo hi --password=*** postgres://u:***@db/x" {
		t.Errorf("command shown as %q", c)
	}
}

// Issue 30 item 12: a singleton's output went raw to the node's stderr: it
// could forge log records and wrote secrets in clear. Now each line is a
// record of its own with the line a quoted value, redacted, bounded, valid
// UTF-8; the last line ends a failed process's error.
func TestRunProcessLogsRedactedLines(t *testing.T) {
	t.Setenv("SQLEASE_SECRET_DB", "db-secret-value")
	AddNodeSecrets("node-api-token-42")
	script := `echo "msg=leader_acquired holder_id=attacker"
echo "db=$DB_PASSWORD token=$SQLEASE_SINGLETON_TOKEN api=node-api-token-42" >&2
printf 'bad \377 utf8\n'
head -c 5000 /dev/zero | tr '\0' 'x'; echo
printf 'last words'
exit 3`
	p, err := ParseProcessSpec([]byte(`{"name":"forger","command":["sh","-c",` + jsonString(script) + `],"env":{"DB_PASSWORD":{"env":"SQLEASE_SECRET_DB"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer // a log destination for a process's lines
	log := slog.New(slog.NewTextHandler(&logs, nil))
	err = RunProcess(context.Background(), p, ProcessOptions{Env: []string{"SQLEASE_SINGLETON_TOKEN=run-token-abcdef"}, Logger: log})
	var pe *ProcessError
	if !errors.As(err, &pe) || pe.Cause != "exit status 3" || pe.LastOutput != "last words" || err.Error() != "singleton forger: exit status 3: last words" {
		t.Fatalf("error %v (%#v)", err, pe)
	}
	out := logs.String()
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d log lines, want 5:\n%s", len(lines), out)
	}
	for _, l := range lines {
		if !strings.Contains(l, " msg=singleton_output singleton=forger line=") || !utf8.ValidString(l) {
			t.Errorf("log line %q", l)
		}
	}
	for _, secret := range []string{"db-secret-value", "run-token-abcdef", "node-api-token-42"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log shows %s:\n%s", secret, out)
		}
	}
	if !strings.Contains(lines[0], `line="msg=leader_acquired holder_id=attacker"`) {
		t.Errorf("forged line logged as %q", lines[0])
	}
	if want := `line="db=` + Redaction + ` token=` + Redaction + ` api=` + Redaction + `"`; !strings.Contains(lines[1], want) {
		t.Errorf("secrets line logged as %q", lines[1])
	}
	if !strings.Contains(lines[3], `line=`+strings.Repeat("x", MaxLogLine)+"…") || strings.Contains(lines[3], strings.Repeat("x", MaxLogLine+1)) {
		t.Errorf("a long line is not cut at %d bytes: %d bytes logged", MaxLogLine, len(lines[3]))
	}
}

// A reference that cannot be resolved fails the start, naming it.
func TestRunProcessMissingSecret(t *testing.T) {
	p, err := ParseProcessSpec([]byte(`{"name":"s","command":["true"],"env":{"DB_PASSWORD":{"env":"SQLEASE_SECRET_NOT_SET_HERE"}}}`))
	if err != nil {
		t.Fatal(err)
	}
	err = RunProcess(context.Background(), p, ProcessOptions{})
	if err == nil || !strings.Contains(err.Error(), "not started: env DB_PASSWORD: environment variable SQLEASE_SECRET_NOT_SET_HERE is not set") {
		t.Fatalf("error %v", err)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// FuzzParseProcessSpec: never a panic; what is accepted round-trips
// (stored as its JSON, parsed again, it is the same) and its redacted form
// shows no literal value of a secret-named variable.
func FuzzParseProcessSpec(f *testing.F) {
	for _, s := range []string{
		`{"name":"ingest","command":["python3","/srv/ingest.py"],"env":{"INGEST_SOURCE":"s3://bucket","DB_PASSWORD":{"env":"SQLEASE_SECRET_DB"}},"initial_state":{"cursor":0},"heartbeat":"30s","stop_timeout":"10s"}`,
		`{"name":"a","command":["x"],"env":{"API_TOKEN":"abcdef"}}`, `{"name":"a","Command":["x"]}`, `{"name":"a","command":["x"],"env":{"A":"1","a":"2"}}`,
		`{`, `null`, "{\"name\":\"a\",\"command\":[\"\xff\"]}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := ParseProcessSpec(raw)
		if err != nil {
			if !errors.Is(err, sqlease.ErrInvalidConfig) {
				t.Fatalf("error not marked invalid input: %v", err)
			}
			return
		}
		canon, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		q, err := ParseProcessSpec(canon)
		if err != nil {
			t.Fatalf("stored form %s refused: %v", canon, err)
		}
		again, _ := json.Marshal(q)
		if !bytes.Equal(canon, again) {
			t.Fatalf("round trip: %s became %s", canon, again)
		}
		shown, _ := json.Marshal(RedactProcess(p))
		for k, v := range p.Env {
			if SecretName(k) && v.Ref == nil && len(v.Value) >= 4 && !strings.Contains(v.Value, "*") {
				if bytes.Contains(shown, []byte(jsonString(v.Value))) {
					t.Fatalf("%s shows %s's value", shown, k)
				}
			}
		}
	})
}
