package action

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// Redacted replaces a secret in what the API shows of an action or a
// singleton definition.
const Redacted = "***"

// Redact returns an action's JSON as reads may show it (the API, the
// dashboard, the CLI): the password of an HTTP action's URL and the
// literal values of headers that carry credentials (SecretHeader) replaced
// by ***; a header that references its secret ({"env": …} or {"file": …})
// is shown as the reference, which holds none. An action without secrets is
// returned unchanged.
//
// What Parse reads is what is redacted: Parse refuses member names spelled
// in another case and members given twice, so the action that runs is the
// one shown. An action Parse refuses (stored before those rules, or by
// hand) is redacted the cautious way: every member whose name looks secret,
// in any case and at any depth, and every URL's password; what is not JSON
// at all is shown as "***".
func Redact(raw json.RawMessage) json.RawMessage {
	var secrets []string
	s, err := parseCached(raw) // Parse, shared with Handle: listings redact every job
	if err == nil {
		if s.Exec != nil {
			return redactExec(raw, s.Exec)
		}
		if s.HTTP == nil {
			return raw
		}
		secrets = urlPasswords(s.HTTP.URL)
		for name, v := range s.HTTP.Headers {
			if SecretHeader(name) {
				secrets = append(secrets, credentialParts(v)...)
			}
		}
		if len(secrets) == 0 {
			return raw
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return json.RawMessage(`"` + Redacted + `"`)
	}
	if _, terr := dec.Token(); terr != io.EOF {
		return json.RawMessage(`"` + Redacted + `"`) // more than one value
	}
	changed := false
	v = redactValue(v, "", secretList(secrets...), &changed)
	if !changed && err == nil {
		return raw
	}
	// A refused action is shown as decoded, never as stored: of members
	// given twice only the last is left (the one encoding/json reads).
	out, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`"` + Redacted + `"`)
	}
	return out
}

// RedactArgs returns a command line as reads may show it: the value of an
// option whose name looks secret (SecretName) replaced by ***, whether
// written --password=x or --password x, and every URL's password. One rule
// for the commands of exec actions and of singletons. The program (args[0])
// is kept but for a URL password.
func RedactArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		switch v, ok := argSecret(args, i); {
		case ok && strings.Contains(a, "="):
			name, _, _ := strings.Cut(a, "=")
			out[i] = name + "=" + Redacted
		case ok && v != "":
			out[i] = Redacted
		default:
			out[i] = redactURL(a)
		}
	}
	return out
}

// argSecret reports whether args[i] is a secret value: --name=value with a
// secret-looking name (the value returned), or the argument after a lone
// --name with one.
func argSecret(args []string, i int) (string, bool) {
	if i == 0 {
		return "", false
	}
	a := args[i]
	if name, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(name, "-") && SecretName(name) {
		return v, true
	}
	if p := args[i-1]; i > 1 && strings.HasPrefix(p, "-") && !strings.Contains(p, "=") && SecretName(p) && !strings.HasPrefix(a, "-") {
		return a, true
	}
	return "", false
}

// ArgSecrets are the values RedactArgs hides in args, for RedactOutput: a
// command that echoes its own arguments must not show them in its output.
func ArgSecrets(args []string) []string {
	var out []string
	for i, a := range args {
		if v, ok := argSecret(args, i); ok && v != "" {
			out = append(out, v)
		}
		out = append(out, urlPasswords(a)...)
	}
	return out
}

// redactExec is Redact of a parsed exec action: its command through
// RedactArgs, the rest as stored. Unchanged when no argument holds a
// secret.
func redactExec(raw json.RawMessage, e *Exec) json.RawMessage {
	cmd := RedactArgs(e.Command)
	if slices.Equal(cmd, e.Command) {
		return raw
	}
	c := *e
	c.Command = cmd
	out, err := json.Marshal(Spec{Exec: &c})
	if err != nil {
		return json.RawMessage(`"` + Redacted + `"`)
	}
	return out
}

// redactValue redacts a decoded JSON value: strings under a secret-looking
// name, URL passwords, and the listed secrets wherever they appear.
func redactValue(v any, name string, secrets []string, changed *bool) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = redactValue(e, k, secrets, changed)
		}
	case []any:
		for i, e := range x {
			x[i] = redactValue(e, name, secrets, changed)
		}
	case string:
		if name != "" && SecretHeader(name) {
			if x != Redacted {
				*changed = true
			}
			return Redacted
		}
		r := redactURL(x)
		for _, s := range secrets {
			r = strings.ReplaceAll(r, s, Redacted)
		}
		if r != x {
			*changed = true
		}
		return r
	}
	return v
}

// redactURL returns s with the password of the URL it holds replaced by
// ***, or s when it holds none.
func redactURL(s string) string {
	if !strings.Contains(s, "@") || !strings.Contains(s, "://") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		// Unparsable: cut the user information out by hand.
		if i := strings.Index(s, "://"); i >= 0 {
			rest := s[i+3:]
			if at := strings.LastIndex(rest[:hostEnd(rest)], "@"); at >= 0 {
				return s[:i+3] + Redacted + rest[at:]
			}
		}
		return s
	}
	if _, has := u.User.Password(); !has {
		return s
	}
	u.User = url.UserPassword(u.User.Username(), Redacted)
	return strings.Replace(u.String(), url.QueryEscape(Redacted), Redacted, 1)
}

// hostEnd is the length of the authority at the start of rest (what
// follows "scheme://").
func hostEnd(rest string) int {
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		// A password may hold '/', '?' or '#' unescaped: the authority
		// runs to the last '@' before a path, if any comes later.
		if at := strings.LastIndex(rest, "@"); at > i {
			if j := strings.IndexAny(rest[at:], "/?#"); j >= 0 {
				return at + j
			}
			return len(rest)
		}
		return i
	}
	return len(rest)
}

// SecretHeader reports whether a header's value is a credential, to be
// shown as *** and redacted from run output: Authorization,
// Proxy-Authorization, Cookie, Set-Cookie, a header named exactly Token,
// Key, Secret, Signature, Sig or Auth, and any name SecretName matches
// (X-Api-Key, X-Auth-Token, X-Hub-Signature-256, X-Client-Secret, …). It is
// generous by intent: a value wrongly taken for a secret is only hidden.
func SecretHeader(name string) bool {
	switch strings.ToLower(name) {
	case "authorization", "proxy-authorization", "cookie", "set-cookie",
		"token", "key", "secret", "signature", "sig", "auth", "pass", "passwd":
		return true
	}
	return SecretName(name)
}

// secretWords are the parts of a name that make its value a secret.
var secretWords = []string{"password", "passwd", "passphrase", "secret", "token", "credential",
	"apikey", "api-key", "api_key", "key", "signature", "auth", "cookie", "session", "private", "bearer"}

// SecretName reports whether a header or variable with this name holds a
// secret: its name contains, in any case, one of password, passwd,
// passphrase, secret, token, credential, apikey, key, signature, auth,
// cookie, session, private or bearer (DB_PASSWORD, GITHUB_TOKEN,
// AWS_SECRET_ACCESS_KEY, X-Hub-Signature-256, …).
func SecretName(name string) bool {
	n := strings.ToLower(name)
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// RedactOutput returns text — a run's output or error, a line a singleton
// process wrote — with the node's secrets (AddNodeSecrets, the node's
// SQLEASE_SECRET_* variables, its proxy's password) and the given ones
// replaced by Redaction, in each form an echo may take them: as they are,
// JSON-escaped, URL-escaped and base64-encoded. The result is valid UTF-8.
func RedactOutput(text string, secrets ...string) string {
	list := secretList(append(nodeSecrets(), secrets...)...)
	return redactHead([]byte(text), len(text), list)
}

// The node's own secrets.
var registered struct {
	sync.RWMutex
	values []string
}

// minNodeSecret is the shortest value AddNodeSecrets keeps: a shorter one
// (a fragment of a password split at its delimiters) would redact common
// text from every output.
const minNodeSecret = 4

// AddNodeSecrets registers values that must never appear in a run's output
// or error, nor in a line a singleton process logs: the node's API token,
// its database password. The daemon calls it once when it starts; it is
// safe for concurrent use, and values add up (empty values and values
// shorter than 4 bytes are ignored).
func AddNodeSecrets(values ...string) {
	registered.Lock()
	defer registered.Unlock()
	for _, v := range values {
		if len(v) >= minNodeSecret {
			registered.values = append(registered.values, v)
		}
	}
	nodeList.Store(nil)
}

// SnapshotNodeEnv reads the node's SQLEASE_SECRET_* values and its HTTP
// proxy's password from the environment now, for every later run's
// redaction, instead of at each run. The daemon calls it when a node
// starts, where it reads the environment twins of its flags (API.md) —
// and net/http reads the proxy variables once too. Reading the environment
// at each run cost about 4 µs with 100 variables (a container's service
// links), most of it copying os.Environ. The environment of a running
// process changes only from within (os.Setenv): a variable set later is
// not a node secret until the next snapshot, but a secret an action
// references ({"env": …}) is read when the run resolves it and redacted
// from that run's output, always.
func SnapshotNodeEnv() {
	s := slices.Clip(envSecrets())
	nodeEnv.Store(&s)
}

// nodeEnv is the environment's secrets as SnapshotNodeEnv read them (nil:
// none taken, read at each use); nodeList caches nodeSecrets' answer from
// it and the registered secrets (nil: to be built again).
var (
	nodeEnv  atomic.Pointer[[]string]
	nodeList atomic.Pointer[nodeSecretList]
)

type nodeSecretList struct {
	env  *[]string // the snapshot it was built from
	list []string  // capacity = length: an append copies it
}

// nodeSecrets are the secrets redacted from every action's output even
// where no action names them (a command that found its way to one): the
// values of the node's SQLEASE_SECRET_* variables, those registered by
// AddNodeSecrets, and the password of the node's HTTP proxy (which
// net/http sends as Proxy-Authorization). Callers append to it, never
// write into it: after SnapshotNodeEnv every run shares one list.
func nodeSecrets() []string {
	env := nodeEnv.Load()
	if env == nil {
		out := envSecrets()
		registered.RLock()
		out = append(out, registered.values...)
		registered.RUnlock()
		return out
	}
	if l := nodeList.Load(); l != nil && l.env == env {
		return l.list
	}
	// Built and stored under the lock AddNodeSecrets takes: a value
	// registered meanwhile is either in it or clears it.
	registered.Lock()
	defer registered.Unlock()
	list := slices.Clip(append(slices.Clone(*env), registered.values...))
	nodeList.Store(&nodeSecretList{env: env, list: list})
	return list
}

// envSecrets are the secrets of the process's environment: the values of
// its SQLEASE_SECRET_* variables and its proxies' passwords.
func envSecrets() []string {
	var out []string
	for _, kv := range os.Environ() {
		name, v, ok := strings.Cut(kv, "=")
		if !ok || v == "" {
			continue
		}
		switch {
		case strings.HasPrefix(name, SecretEnvPrefix):
			out = append(out, v)
		case strings.EqualFold(name, "HTTP_PROXY"), strings.EqualFold(name, "HTTPS_PROXY"), strings.EqualFold(name, "ALL_PROXY"):
			out = append(out, urlPasswords(v)...)
		}
	}
	return out
}

// secretList orders secrets for redaction: each in the forms an echo may
// take it (secretForms), distinct, non-empty, longest first (so that a
// secret containing another is replaced whole).
func secretList(secrets ...string) []string {
	if len(secrets) == 0 {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, s := range secrets {
		for _, f := range secretForms(s) {
			if f != "" && !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// secretForms returns s as it is and as an echo may show it: JSON-escaped
// (with and without HTML escaping), URL-escaped (query and path) and
// base64-encoded (standard and URL alphabets, with and without padding).
func secretForms(s string) []string {
	if s == "" {
		return nil
	}
	if f, ok := forms.Load(s); ok {
		return f.([]string)
	}
	out := []string{s}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for _, html := range []bool{true, false} {
		b.Reset()
		enc.SetEscapeHTML(html)
		if enc.Encode(s) == nil {
			q := strings.TrimSuffix(b.String(), "\n")
			out = append(out, q[1:len(q)-1])
		}
	}
	out = append(out, url.QueryEscape(s), url.PathEscape(s),
		base64.StdEncoding.EncodeToString([]byte(s)), base64.URLEncoding.EncodeToString([]byte(s)),
		base64.RawStdEncoding.EncodeToString([]byte(s)), base64.RawURLEncoding.EncodeToString([]byte(s)))
	if formsCount.Add(1) > maxForms {
		// Full, mostly of run tokens (each a secret for one run): start
		// again. Kept full, every secret first seen from now on (a new
		// action's) would be computed again at each run.
		forms.Clear()
		formsCount.Store(1)
	}
	forms.Store(s, out)
	return out
}

// forms caches secretForms: the node's secrets are redacted from every
// run's output, thousands a second. At most about maxForms are kept; when
// full it is emptied, and the secrets in use come back at their next use.
var (
	forms      sync.Map
	formsCount atomic.Int64
)

const maxForms = 4096

// credentialParts returns a header value and, for "Scheme credentials"
// (Bearer, Basic, Token …), the credentials alone, and for Basic ones the
// decoded user:password and password.
func credentialParts(v string) []string {
	out := []string{v}
	if scheme, cred, ok := strings.Cut(strings.TrimSpace(v), " "); ok {
		cred = strings.TrimSpace(cred)
		out = append(out, cred)
		if strings.EqualFold(scheme, "basic") {
			if dec, err := base64.StdEncoding.DecodeString(cred); err == nil {
				out = append(out, string(dec))
				if _, pass, ok := strings.Cut(string(dec), ":"); ok {
					out = append(out, pass)
				}
			}
		}
	}
	return out
}

// urlPasswords returns the password of a URL's user information, if any,
// as parsed and as written, and the credentials net/http derives from it:
// the base64 of user:password it sends as "Authorization: Basic …" (or
// Proxy-Authorization), and that header's value.
func urlPasswords(raw string) []string {
	if !strings.Contains(raw, "@") {
		return nil // no user information: no parse (it ran for every delivery)
	}
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return nil
	}
	p, ok := u.User.Password()
	if !ok {
		return nil
	}
	basic := base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + p))
	out := []string{p, basic, "Basic " + basic}
	// As written in the URL (escaped as its author chose).
	if i := strings.Index(raw, "://"); i >= 0 {
		rest := raw[i+3:]
		if at := strings.LastIndex(rest[:hostEnd(rest)], "@"); at >= 0 {
			if _, written, ok := strings.Cut(rest[:at], ":"); ok {
				out = append(out, written)
			}
		}
	}
	return out
}
