//go:build unix

package action

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sqlease/sqlease"
)

// Issue 30 item 8: encoding/json matches member names in any case and
// keeps the last of two, so an action spelled {"HTTP": {"URL": …}} ran
// while Redact, reading a map, showed its password and token in clear; and
// of {"http": decoy, "Http": real} the hidden one ran. Parse now refuses
// such text, naming the member, and Redact redacts what Parse reads.
func TestParseRefusesNonCanonicalJSON(t *testing.T) {
	for _, c := range []struct{ raw, field string }{
		{`{"HTTP":{"URL":"https://u:pw-secret@h.example/","Headers":{"Authorization":"Bearer tok-secret"}}}`, "action.HTTP"},
		{`{"http":{"URL":"https://u:pw-secret@h.example/"}}`, "action.http.URL"},
		{`{"http":{"url":"https://h.example/","Headers":{"Authorization":"Bearer tok-secret"}}}`, "action.http.Headers"},
		{`{"http":{"url":"http://decoy.example/"},"Http":{"url":"http://real.example/"}}`, "action.Http"},
		{`{"http":{"url":"http://decoy.example/"},"http":{"url":"http://real.example/"}}`, "action.http"},
		{`{"http":{"url":"http://h.example/","headers":{"Authorization":"Bearer decoy","authorization":"Bearer tok-secret"}}}`, "action.http.headers.authorization"},
		{`{"http":{"url":"http://h.example/","headers":{"Authorization":{"ENV":"SQLEASE_SECRET_X"}}}}`, "action.http.headers"},
		{`{"Exec":{"command":["id"]}}`, "action.Exec"},
		{`{"exec":{"Command":["id"]}}`, "action.exec.Command"},
		{`{"exec":{"command":["id"],"timeout":"1s","timeout":"2h"}}`, "action.exec.timeout"},
	} {
		_, err := Parse([]byte(c.raw))
		if err == nil || !errors.Is(err, sqlease.ErrInvalidConfig) || !strings.Contains(err.Error(), c.field) {
			t.Errorf("Parse(%s) = %v, want an invalid-config error naming %s", c.raw, err, c.field)
		}
		if red := string(Redact([]byte(c.raw))); strings.Contains(red, "pw-secret") || strings.Contains(red, "tok-secret") {
			t.Errorf("Redact(%s) = %s: a secret in clear", c.raw, red)
		}
	}
	// A gate on exec actions is not passed by a spelling.
	if !IsExec([]byte(`{"Exec":{"command":["id"]}}`)) || !IsExec([]byte(`{"exec":{"command":["id"]}}`)) || IsExec([]byte(`{"http":{"url":"http://h/"}}`)) {
		t.Error("IsExec misreads an exec action")
	}
}

// Redact redacts whatever the action that runs carries, and only that
// changes what is shown.
func TestRedactWhatRuns(t *testing.T) {
	for _, c := range []struct{ raw, want string }{
		{`{"http":{"url":"https://u:pw-secret@h.example/x","headers":{"Authorization":"Bearer tok-secret","X-Team":"b"}}}`,
			`{"http":{"headers":{"Authorization":"***","X-Team":"b"},"url":"https://u:***@h.example/x"}}`},
		{`{"http":{"url":"https://h.example/","headers":{"token":"tok-secret","X-Hub-Signature-256":"sha256=tok-secret2","X-Api-Key":"k-secret"}}}`,
			`{"http":{"headers":{"X-Api-Key":"***","X-Hub-Signature-256":"***","token":"***"},"url":"https://h.example/"}}`},
		{`{"http":{"url":"https://h.example/","headers":{"X-Team":"b"}}}`, `{"http":{"url":"https://h.example/","headers":{"X-Team":"b"}}}`},
		// Refused by Parse (stored before the rules): redacted cautiously.
		{`{"HTTP":{"URL":"https://u:pw-secret@h.example/","HEADERS":{"AUTHORIZATION":"Bearer tok-secret"}}}`,
			`{"HTTP":{"HEADERS":{"AUTHORIZATION":"***"},"URL":"https://u:***@h.example/"}}`},
		{`Authorization: Bearer tok-secret`, `"***"`},
	} {
		if got := string(Redact([]byte(c.raw))); got != c.want {
			t.Errorf("Redact(%s)\n = %s\nwant %s", c.raw, got, c.want)
		}
	}
}

func TestSecretHeader(t *testing.T) {
	for _, name := range []string{"Authorization", "proxy-authorization", "Cookie", "Token", "token", "X-Hub-Signature-256",
		"X-Signature", "X-Api-Key", "X-API-KEY", "Api-Key", "X-Auth-Token", "X-Client-Secret", "X-Password", "Private-Token", "X-Session-Id", "Key"} {
		if !SecretHeader(name) {
			t.Errorf("SecretHeader(%q) = false", name)
		}
	}
	for _, name := range []string{"Content-Type", "X-Team", "Accept", "User-Agent", "X-Request-Id"} {
		if SecretHeader(name) {
			t.Errorf("SecretHeader(%q) = true", name)
		}
	}
}

// echoServer answers with the request's headers as JSON (as a debugging
// receiver, httpbin's /headers, would), and the Authorization header on a
// line of its own.
func echoServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := json.Marshal(r.Header)
		_, _ = w.Write(b)
		_, _ = w.Write([]byte("\nauth=" + r.Header.Get("Authorization") + "\n"))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Issue 30 item 9: a URL's password reached the run's output through the
// Authorization: Basic header net/http derives from it.
func TestURLPasswordDerivedBasicRedacted(t *testing.T) {
	srv := echoServer(t)
	const pass = "pw-Secret-9"
	s, err := Parse([]byte(`{"http":{"url":"http://admin:` + pass + `@` + strings.TrimPrefix(srv.URL, "http://") + `/"}}`))
	if err != nil {
		t.Fatal(err)
	}
	err, out := runKept(t, s, 8192)
	if err != nil {
		t.Fatal(err)
	}
	basic := base64.StdEncoding.EncodeToString([]byte("admin:" + pass))
	if !strings.Contains(out, "auth="+Redaction) || strings.Contains(out, basic) || strings.Contains(out, base64.RawStdEncoding.EncodeToString([]byte("admin:"+pass))) || strings.Contains(out, pass) {
		t.Errorf("output shows the derived credentials:\n%s", out)
	}
}

// Issue 30 item 22: a header named Token, X-Hub-Signature-256, and a
// JSON-escaped echo of a secret were shown in the run's output.
func TestOutputRedactsMoreHeadersAndEscapedForms(t *testing.T) {
	srv := echoServer(t)
	const sig = `sha256=<sig>&"more"/x`
	raw, _ := json.Marshal(map[string]any{"http": map[string]any{"url": srv.URL + "/", "headers": map[string]string{
		"Token": "tok-secret-1", "X-Hub-Signature-256": sig, "X-Team": "billing"}}})
	s, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	err, out := runKept(t, s, 8192)
	if err != nil {
		t.Fatal(err)
	}
	escaped, _ := json.Marshal(sig)
	if strings.Contains(out, "tok-secret-1") || strings.Contains(out, "<sig>") || strings.Contains(out, `\u003csig\u003e`) ||
		strings.Contains(out, string(escaped[1:len(escaped)-1])) || !strings.Contains(out, "billing") {
		t.Errorf("output:\n%s", out)
	}
	// A node secret a command prints JSON-escaped, URL-escaped or in
	// base64 is redacted too.
	const secret = `s3cret"<&>/value`
	t.Setenv("SQLEASE_SECRET_X", secret)
	js, _ := json.Marshal(secret)
	script := `printf '%s\n' "$1" "$2" "$3"`
	err, out = runKept(t, Spec{Exec: &Exec{Command: []string{"sh", "-c", script, "sh", string(js),
		"s3cret%22%3C%26%3E%2Fvalue", base64.StdEncoding.EncodeToString([]byte(secret))}}}, 8192)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"` + Redaction + `"` + "\n" + Redaction + "\n" + Redaction + "\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
}

// Issue 30 item 23: the node's API token and database password, readable
// by a command from its parent's environment, were not redacted from its
// output.
func TestNodeSecretsRedacted(t *testing.T) {
	AddNodeSecrets("api-token-0123456789", "db-Passw0rd", "", "ab")
	err, out := runKept(t, execSpec(0, `echo token=api-token-0123456789 db=db-Passw0rd short=ab; exit 3`), 1024)
	if want := "token=" + Redaction + " db=" + Redaction + " short=ab\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	if err == nil || strings.Contains(err.Error(), "api-token") || strings.Contains(err.Error(), "Passw0rd") {
		t.Errorf("error %v", err)
	}
	if got := RedactOutput("x api-token-0123456789 y"); got != "x "+Redaction+" y" {
		t.Errorf("RedactOutput = %q", got)
	}
}

// FuzzRedact: a secret placed in an action's URL password or in a
// secret-named header never appears in Redact's output, whatever the case
// of the member names and whether Parse accepts the action or not.
func FuzzRedact(f *testing.F) {
	f.Add(uint32(0), "topsecret", uint8(0), false)
	f.Add(uint32(0xffffffff), "Zq9xx", uint8(3), true)
	f.Add(uint32(0x5a5a), "hunter2hunter", uint8(7), true)
	headers := []string{"Authorization", "Token", "X-Hub-Signature-256", "X-Api-Key", "Cookie", "Proxy-Authorization", "X-Auth-Token", "Private-Token"}
	f.Fuzz(func(t *testing.T, cases uint32, secret string, header uint8, twice bool) {
		var b strings.Builder
		for _, r := range secret {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
				b.WriteRune(r)
			}
		}
		secret = "Q7" + b.String() + "Z" // never a piece of the JSON around it
		bit := 0
		spell := func(s string) string {
			out := []byte(s)
			for i := range out {
				if cases>>(bit%32)&1 == 1 && out[i] >= 'a' && out[i] <= 'z' {
					out[i] -= 'a' - 'A'
				}
				bit++
			}
			return string(out)
		}
		name := spell(headers[int(header)%len(headers)])
		inner := `{"` + spell("url") + `":"https://user:` + secret + `@h.example/","` + spell("headers") + `":{"` + name + `":"Bearer ` + secret + `"}}`
		raw := `{"` + spell("http") + `":` + inner
		if twice {
			raw += `,"` + spell("http") + `":{"url":"https://h.example/"}`
		}
		raw += "}"
		red := string(Redact(json.RawMessage(raw)))
		if strings.Contains(red, secret) || strings.Contains(red, secret[:len(secret)-1]) {
			t.Fatalf("Redact(%s) = %s", raw, red)
		}
	})
}

// FuzzParse: Parse and Redact never panic on any input, and what Parse
// accepts Redact shows without the URL's password or the literal values of
// secret headers.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"http":{"url":"https://u:pw@h.example/","headers":{"Authorization":"Bearer x","X-Key":{"env":"SQLEASE_SECRET_A"}}}}`,
		`{"exec":{"command":["sh","-c","echo"],"timeout":"5s"}}`, `{"HTTP":{}}`, `{"http":{"url":"http://h/"},"http":{}}`,
		`null`, `[]`, `{"http":{"url":"http://a:b:c@[::1]:9/p?q#f"}}`, "{\"http\":{\"url\":\"\xff\"}}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, err := Parse(raw)
		red := Redact(raw)
		if err != nil || s.HTTP == nil {
			return
		}
		var secrets []string
		if p, ok := urlUserPassword(s.HTTP.URL); ok && len(p) >= 4 && !strings.Contains(p, "*") {
			secrets = append(secrets, p)
		}
		for name, v := range s.HTTP.Headers {
			if SecretHeader(name) && len(v) >= 4 && !strings.Contains(v, "*") {
				secrets = append(secrets, v)
			}
		}
		var shown any
		if err := json.Unmarshal(red, &shown); err != nil {
			t.Fatalf("Redact(%s) = %s: not JSON", raw, red)
		}
		walkStrings(shown, func(str string) {
			for _, sec := range secrets {
				if strings.Contains(str, sec) {
					t.Fatalf("Redact(%s) = %s shows %q", raw, red, sec)
				}
			}
		})
	})
}

func urlUserPassword(raw string) (string, bool) {
	ps := urlPasswords(raw)
	if len(ps) == 0 {
		return "", false
	}
	return ps[0], true
}

func walkStrings(v any, f func(string)) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			f(k)
			walkStrings(e, f)
		}
	case []any:
		for _, e := range x {
			walkStrings(e, f)
		}
	case string:
		f(x)
	}
}

// An exec action's own arguments may carry secrets (--password=x,
// --token x, a URL's password): reads show them as ***, as singletons'
// commands were, and the run's output and error never show them.
func TestRedactExecArguments(t *testing.T) {
	raw := []byte(`{"exec":{"command":["sh","-c","echo \"$@\" >&2; exit 1","sh","--password=pw-secret","--api-token","tok-secret","postgres://u:url-secret@db/x","--verbose","plain"],"timeout":"5s"}}`)
	red := string(Redact(raw))
	for _, s := range []string{"pw-secret", "tok-secret", "url-secret"} {
		if strings.Contains(red, s) {
			t.Errorf("Redact shows %s: %s", s, red)
		}
	}
	for _, s := range []string{`"--password=***"`, `"--api-token","***"`, `"postgres://u:***@db/x"`, `"--verbose","plain"`, `"timeout":"5s"`} {
		if !strings.Contains(red, s) {
			t.Errorf("Redact = %s, want %s in it", red, s)
		}
	}
	if plain := []byte(`{"exec":{"command":["echo","--verbose","hi"]}}`); string(Redact(plain)) != string(plain) {
		t.Errorf("an exec action without secrets changed: %s", Redact(plain))
	}
	s, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	err = s.Run(context.Background(), testRun(t))
	if err == nil {
		t.Fatal("the command failed, want an error")
	}
	for _, sec := range []string{"pw-secret", "tok-secret", "url-secret"} {
		if strings.Contains(err.Error(), sec) {
			t.Errorf("the run's error shows %s: %v", sec, err)
		}
	}
	if !strings.Contains(err.Error(), "--verbose plain") {
		t.Errorf("the run's error %q lost what the command wrote", err)
	}
}
