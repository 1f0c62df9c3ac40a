//go:build unix

package action

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/sqlease/sqlease/scheduler"
)

// runKept runs s as a scheduler keeping limit bytes of output would, and
// returns its error and the output kept.
func runKept(t *testing.T, s Spec, limit int) (error, string) {
	t.Helper()
	ctx, kept := scheduler.WithOutput(context.Background(), limit)
	err := s.Run(ctx, testRun(t))
	return err, kept()
}

func execSpec(timeout time.Duration, script string) Spec {
	return Spec{Exec: &Exec{Command: []string{"sh", "-c", script}, Timeout: Duration(timeout)}}
}

// A command's stdout and stderr are one stream, in the order written.
func TestExecOutputInterleaved(t *testing.T) {
	err, out := runKept(t, execSpec(0, `echo out1; echo err1 >&2; echo out2; printf 'err2' >&2`), 1024)
	if err != nil {
		t.Fatal(err)
	}
	if want := "out1\nerr1\nout2\nerr2"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	// A command that writes nothing keeps no output; neither does a run
	// whose scheduler keeps none.
	if _, out := runKept(t, execSpec(0, `true`), 1024); out != "" {
		t.Errorf("silent command kept %q", out)
	}
	if _, out := runKept(t, execSpec(0, `echo hi`), 0); out != "" {
		t.Errorf("limit 0 kept %q", out)
	}
}

// The tail is kept, marked with the bytes dropped; invalid UTF-8 is
// replaced.
func TestExecOutputTruncated(t *testing.T) {
	err, out := runKept(t, execSpec(0, `i=0; while [ $i -lt 2000 ]; do echo "line $i"; i=$((i+1)); done; printf 'bad \377 end'`), 100)
	if err != nil {
		t.Fatal(err)
	}
	total := len("bad \377 end")
	for i := range 2000 {
		total += len(fmt.Sprintf("line %d\n", i))
	}
	// The bad byte becomes U+FFFD (3 bytes), so the last 100 bytes of
	// output are 102 stored: 2 more are dropped.
	marker := scheduler.OutputDropped(int64(total - 100 + 2))
	rest, ok := strings.CutPrefix(out, marker)
	if !ok || !strings.HasSuffix(rest, "\nline 1999\nbad \uFFFD end") || !utf8.ValidString(out) || len(rest) != 100 {
		t.Errorf("output %q, want %q then the last 100 bytes, valid UTF-8", out, marker)
	}
}

// The node's SQLEASE_SECRET_* values are redacted from a command's output
// and its error, also when the writes split them and when the tail's cut
// falls inside one.
func TestExecOutputRedacted(t *testing.T) {
	const secret = "hunter2-very-secret"
	t.Setenv("SQLEASE_SECRET_DB", secret)
	script := `printf 'pass=hunter2-'; sleep 0.05; printf 'very-secret\n'; echo "$1" >&2; exit 4`
	err, out := (func() (error, string) {
		ctx, kept := scheduler.WithOutput(context.Background(), 1024)
		err := (Spec{Exec: &Exec{Command: []string{"sh", "-c", script, "sh", secret}}}).Run(ctx, testRun(t))
		return err, kept()
	})()
	if want := "pass=" + Redaction + "\n" + Redaction + "\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	if err == nil || err.Error() != "exec action: exit status 4: "+Redaction {
		t.Errorf("error %v, want the exit status and the redacted last line", err)
	}
	// A cut inside the secret drops it whole.
	_, out = runKept(t, execSpec(0, `printf 'xxxxhunter2-very-secret-tail'`), len("ery-secret-tail"))
	if strings.Contains(out, "secret") || !strings.HasSuffix(out, "-tail") {
		t.Errorf("output %q: a fragment of the secret, or not the tail", out)
	}
}

// A failed run's error is one line naming the cause.
func TestExecErrorOneLine(t *testing.T) {
	for _, tc := range []struct {
		script  string
		timeout time.Duration
		want    string
	}{
		{`echo first; echo second >&2; echo "last line"; exit 3`, 0, "exec action: exit status 3: last line"},
		{`echo bye; kill -TERM $$`, 0, "exec action: killed by signal SIGTERM: bye"},
		{`echo started; exec sleep 10`, 200 * time.Millisecond, "exec action: timed out after 200ms (killed)"},
	} {
		err, out := runKept(t, execSpec(tc.timeout, tc.script), 1024)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: error %v, want %q", tc.script, err, tc.want)
		}
		if out == "" {
			t.Errorf("%s: no output kept", tc.script)
		}
	}
}

// An HTTP action keeps the status line and the body; credentials the
// action sends are redacted where the server echoes them.
func TestHTTPOutput(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		status, _ := strconv.Atoi(r.URL.Query().Get("status"))
		w.WriteHeader(status)
		fmt.Fprintf(w, "auth=%s key=%s\nsecond line\n", r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"))
	}))
	t.Cleanup(srv.Close)
	t.Setenv("SQLEASE_SECRET_HOOK", "ref-secret-value")
	s, err := Parse([]byte(`{"http": {"url": "` + srv.URL + `/?status=200", "headers": {"Authorization": "Bearer literal-token", "X-Api-Key": {"env": "SQLEASE_SECRET_HOOK"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	err, out := runKept(t, s, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if want := "HTTP/1.1 200 OK\nauth=" + Redaction + " key=" + Redaction + "\nsecond line\n"; out != want {
		t.Errorf("output %q, want %q", out, want)
	}
	s.HTTP.URL = srv.URL + "/?status=502"
	err, out = runKept(t, s, 1024)
	if want := "http action: POST: HTTP status 502 Bad Gateway: auth=" + Redaction + " key=" + Redaction + "…"; err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
	if !strings.HasPrefix(out, "HTTP/1.1 502 Bad Gateway\n") || strings.Contains(out, "literal-token") || strings.Contains(out, "ref-secret") {
		t.Errorf("output %q", out)
	}
}

// TestCaptureProperty: whatever the writes' sizes, the kept tail is the
// output's last bytes with each secret replaced whole — never a fragment —
// and the dropped count adds up.
func TestCaptureProperty(t *testing.T) {
	const secret = "QWZK"
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 2000 {
		var stream strings.Builder
		for range rng.IntN(40) {
			if rng.IntN(3) == 0 {
				stream.WriteString(secret)
			} else {
				stream.WriteString(strings.Repeat("01\n"[rng.IntN(3):][:1], 1+rng.IntN(5)))
			}
		}
		all := stream.String()
		limit := 1 + rng.IntN(30)
		c := newCapture(limit, newSecretSet(secret))
		for rest := all; rest != ""; {
			n := min(len(rest), 1+rng.IntN(6))
			_, _ = c.Write([]byte(rest[:n]))
			rest = rest[n:]
		}
		tail, dropped := c.tail()
		if strings.ContainsAny(strings.ReplaceAll(tail, Redaction, ""), secret) {
			t.Fatalf("trial %d: tail %q of %q (limit %d) shows part of the secret", trial, tail, all, limit)
		}
		restored := strings.ReplaceAll(tail, Redaction, secret)
		if int(dropped)+len(restored) != len(all) || all[dropped:] != restored {
			t.Fatalf("trial %d: tail %q, dropped %d of %q (limit %d): not its tail", trial, tail, dropped, all, limit)
		}
		if len(restored) > limit {
			t.Fatalf("trial %d: kept %d bytes of output, limit %d", trial, len(restored), limit)
		}
		// The head an HTTP error shows: the first limit bytes, a secret
		// across them whole, none cut at the end of what was read.
		head := redactHead([]byte(all[:min(len(all), limit+len(secret)-1)]), limit, secretList(secret))
		if strings.ContainsAny(strings.ReplaceAll(head, Redaction, ""), secret) {
			t.Fatalf("trial %d: head %q of %q (limit %d) shows part of the secret", trial, head, all, limit)
		}
		if restored := strings.ReplaceAll(head, Redaction, secret); !strings.HasPrefix(all, restored) ||
			len(restored) < min(limit, len(all)) || len(restored) >= limit+len(secret) {
			t.Fatalf("trial %d: head %q of %q (limit %d): not its head", trial, head, all, limit)
		}
	}
}

// TestSecretSetShortTexts: the forms of a secret are computed only for a
// text at least as long as the secret, and every form is found in a text
// that is nothing but that form (the shortest text that can show it).
func TestSecretSetShortTexts(t *testing.T) {
	const secret = "pa55 w<ö>rd&"
	set := newSecretSet("a-longer-node-secret", secret)
	if got := set.listFor(len(secret) - 1); got != nil {
		t.Errorf("listFor(%d) = %q, want none: no secret fits", len(secret)-1, got)
	}
	if got := set.listFor(len(secret)); len(got) == 0 {
		t.Errorf("listFor(%d) is empty, want the forms of %q", len(secret), secret)
	}
	for _, form := range secretForms(secret) {
		c := newCapture(1024, newSecretSet("a-longer-node-secret", secret))
		_, _ = c.Write([]byte(form))
		if tail, _ := c.tail(); tail != Redaction {
			t.Errorf("the output %q (a form of the secret) is kept as %q, want %q", form, tail, Redaction)
		}
	}
	if m := set.maxForm(); m < 6*len("a-longer-node-secret") {
		t.Errorf("maxForm() = %d, below 6 bytes for each of the longest secret's", m)
	}
}

func TestFailureMatches(t *testing.T) {
	err, _ := runKept(t, execSpec(100*time.Millisecond, `sleep 5`), 0)
	if !errors.Is(err, ErrTimeout) {
		t.Errorf("timeout error %v does not match ErrTimeout", err)
	}
}

// BenchmarkCapture: a command writing 1 MiB in 4 KiB writes, the default
// 64 KiB kept, three secrets redacted.
func BenchmarkCapture(b *testing.B) {
	chunk := []byte(strings.Repeat("log line with some text 0123456789\n", 4096/36))
	secrets := newSecretSet("s3cr3t-one", "another-secret-value", "tok_abcdef")
	b.SetBytes(1 << 20)
	for range b.N {
		c := newCapture(scheduler.DefaultOutputLimit, secrets)
		for n := 0; n < 1<<20; n += len(chunk) {
			_, _ = c.Write(chunk)
		}
		_, _ = c.tail()
	}
}
