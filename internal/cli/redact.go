package cli

import (
	"net/url"
	"regexp"
	"strings"
)

// The database setting carries a password in many forms; none of them may
// reach a log line or an error message (issue 11). redactDSN masks the
// secrets of every form the dialects accept, and dsnSecrets lists them so
// that errors quoting the string (drivers do) can be scrubbed.

const mask = "xxxxx"

// secretKV matches key=value secrets of libpq key/value strings, ADO
// connection strings and URL query parameters: the value may be quoted
// ('…' with \ escapes, "…", {…}) or run to the next separator.
var secretKV = regexp.MustCompile(`(?i)(^|[\s;&?])((?:ssl)?password|pwd|pass|_auth_pass|fedauth_token|access_token|token)(\s*=\s*)('(?:[^'\\]|\\.)*'|"[^"]*"|\{[^}]*\}|[^;\s&]*)`)

// dsnSecrets returns the secret values in a database setting.
func dsnSecrets(s string) []string {
	var out []string
	add := func(v string) {
		v = strings.Trim(v, `'"{}`)
		if v != "" && v != mask {
			out = append(out, v)
			if u, err := url.QueryUnescape(v); err == nil && u != v {
				out = append(out, u)
			}
			// Parsers quote the pieces they choke on ("invalid port
			// \":Hunter2\""): the pieces between URL delimiters too.
			for _, p := range strings.FieldsFunc(v, func(r rune) bool { return strings.ContainsRune("#/@?:%&;= '\\", r) }) {
				if p != v {
					out = append(out, p)
				}
			}
		}
	}
	for _, m := range secretKV.FindAllStringSubmatch(s, -1) {
		add(m[4])
	}
	if user, pass, ok := userinfo(s); ok {
		_ = user
		add(pass)
	}
	return out
}

// userinfo finds user:password before the host of a URL
// (scheme://user:pass@host/…) or of a go-sql-driver DSN
// (user:pass@tcp(host)/db). The last '@' before the host counts: a password
// may contain '@', '/', '#' or ':' unescaped.
func userinfo(s string) (user, pass string, ok bool) {
	rest := s
	if i := strings.Index(s, "://"); i >= 0 {
		rest = s[i+3:]
	}
	// The host part starts after the last '@' that precedes a host: for a
	// go-sql-driver DSN the "@tcp(" / "@unix(" marker, else the last '@'
	// of the string before a query.
	at := -1
	for _, marker := range []string{"@tcp(", "@unix(", "@udp("} {
		if i := strings.LastIndex(rest, marker); i > at {
			at = i
		}
	}
	if at < 0 {
		q := rest
		if i := strings.LastIndex(q, "?"); i >= 0 && !strings.Contains(q[i:], "@") {
			q = q[:i]
		}
		at = strings.LastIndex(q, "@")
	}
	if at < 0 {
		return "", "", false
	}
	ui := rest[:at]
	c := strings.IndexByte(ui, ':')
	if c < 0 {
		return ui, "", false
	}
	return ui[:c], ui[c+1:], true
}

// redactDSN returns s with every secret masked.
func redactDSN(s string) string {
	out := secretKV.ReplaceAllString(s, "${1}${2}${3}"+mask)
	if user, pass, ok := userinfo(out); ok && pass != "" && pass != mask {
		out = strings.Replace(out, user+":"+pass+"@", user+":"+mask+"@", 1)
	}
	return scrubText(out, dsnSecrets(s))
}

// scrubText replaces each secret (of 3 bytes or more) in text.
func scrubText(text string, secrets []string) string {
	for _, sec := range secrets {
		if len(sec) >= 3 {
			text = strings.ReplaceAll(text, sec, mask)
		}
	}
	return text
}

// scrubbed is an error whose text has the database setting's secrets
// masked; it unwraps to the original, for errors.Is.
type scrubbed struct {
	err  error
	text string
}

func (e scrubbed) Error() string { return e.text }
func (e scrubbed) Unwrap() error { return e.err }

// scrubErr masks dsn's secrets in err's text.
func scrubErr(err error, dsn string) error {
	if err == nil {
		return nil
	}
	text := scrubText(err.Error(), dsnSecrets(dsn))
	if text == err.Error() {
		return err
	}
	return scrubbed{err: err, text: text}
}
