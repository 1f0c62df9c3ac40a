package sqlserver

import (
	"fmt"
	"net/url"
	"strings"
	"unicode"

	"github.com/microsoft/go-mssqldb/azuread"
	"github.com/microsoft/go-mssqldb/msdsn"
	"github.com/sqlease/sqlease"
)

// Connection strings come in three forms, as the driver reads them:
//
//	sqlserver://user:pass@host:port/instance?database=db&fedauth=…
//	server=host,port;user id=…;password=…;database=…     (ADO; "…" quotes)
//	odbc:server=host;uid=…;pwd={…}                        (ODBC; {…} quotes)
//
// Keys are case-insensitive; ADO and ODBC accept synonyms (pwd, uid).

// secretKeys are the keys whose values are credentials: a SQL login's
// password (and its replacement), a service principal's client secret
// (password), and the assertions and tokens of other Entra ID flows.
var secretKeys = map[string]bool{
	"password":        true,
	"pwd":             true,
	"change password": true,
	"clientassertion": true,
	"userassertion":   true,
	"systemtoken":     true,
}

const redacted = "xxxxx"

// UsesEntraID reports whether dsn signs in with Microsoft Entra ID: it has a
// fedauth parameter, such as fedauth=ActiveDirectoryDefault (the default
// credential chain: environment, workload identity, managed identity, Azure
// CLI) or ActiveDirectoryManagedIdentity. [Open] opens such a string through
// the driver's azuread package.
func UsesEntraID(dsn string) bool { return params(dsn)["fedauth"] != "" }

// HasPassword reports whether dsn carries a credential: a password (a SQL
// login's, or an Entra ID service principal's client secret) or another
// secret such as a client assertion. Configuration that should hold no
// secret can refuse such a string; [Redact] hides them for logs.
func HasPassword(dsn string) bool {
	for k, v := range params(dsn) {
		if secretKeys[k] && v != "" {
			return true
		}
	}
	return false
}

// WithEntraID returns dsn set to sign in with Entra ID's default credential
// chain (fedauth=ActiveDirectoryDefault), for a command-line flag or option
// that asks for it. A dsn that already has a fedauth parameter is returned
// unchanged. It returns an error wrapping sqlease.ErrInvalidConfig when dsn
// carries a password: the point of Entra ID is that none is stored.
func WithEntraID(dsn string) (string, error) {
	if HasPassword(dsn) {
		return "", fmt.Errorf("%w: sqlserver connection string %s carries a password; Entra ID needs none", sqlease.ErrInvalidConfig, Redact(dsn))
	}
	if UsesEntraID(dsn) {
		return dsn, nil
	}
	if !isURL(dsn) {
		return strings.TrimRightFunc(dsn, func(r rune) bool { return r == ';' || unicode.IsSpace(r) }) +
			";fedauth=" + azuread.ActiveDirectoryDefault, nil
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("%w: sqlserver connection string %s is not a valid URL", sqlease.ErrInvalidConfig, Redact(dsn))
	}
	q := u.Query()
	q.Set("fedauth", azuread.ActiveDirectoryDefault)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// Redact returns dsn with every credential replaced by "xxxxx", for logs and
// error messages. It fails safe: a string it cannot take apart comes back as
// a placeholder, and so does one in which a credential would still show.
func Redact(dsn string) string {
	var out string
	if isURL(dsn) {
		u, err := url.Parse(dsn)
		if err != nil {
			return "sqlserver://(unparsable connection string)"
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), redacted)
		}
		q := u.Query()
		changed := false
		for k := range q {
			if secretKeys[strings.ToLower(k)] {
				q[k] = []string{redacted}
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
		out = u.String()
	} else {
		lead, body := "", dsn
		if isODBC(dsn) {
			lead, body = "odbc:", dsn[len("odbc:"):]
		}
		parts := splitParts(body, lead != "")
		for i, p := range parts {
			if k, _, ok := keyValue(p, lead != ""); ok && secretKeys[k] {
				parts[i] = p[:strings.IndexByte(p, '=')+1] + redacted
			}
		}
		out = lead + strings.Join(parts, ";")
	}
	for k, v := range params(dsn) {
		if secretKeys[k] && len(v) >= 4 && strings.Contains(out, v) {
			return "(sqlserver connection string redacted)"
		}
	}
	return out
}

func isURL(dsn string) bool  { return strings.HasPrefix(dsn, "sqlserver://") }
func isODBC(dsn string) bool { return strings.HasPrefix(dsn, "odbc:") }

// params returns the connection string's parameters under lower-case keys,
// as the driver reads them; if the driver cannot read the string, as this
// package's own splitting reads it.
func params(dsn string) map[string]string {
	if cfg, err := msdsn.Parse(dsn); err == nil {
		return cfg.Parameters
	}
	res := map[string]string{}
	if isURL(dsn) {
		u, err := url.Parse(dsn)
		if err != nil {
			return res
		}
		if p, ok := u.User.Password(); ok {
			res["password"] = p
		}
		for k, v := range u.Query() {
			if len(v) > 0 {
				res[strings.ToLower(k)] = v[0]
			}
		}
		return res
	}
	odbc := isODBC(dsn)
	body := strings.TrimPrefix(dsn, "odbc:")
	for _, p := range splitParts(body, odbc) {
		if k, v, ok := keyValue(p, odbc); ok {
			res[k] = v
		}
	}
	return res
}

// splitParts splits an ADO or ODBC connection string at the semicolons
// that separate its key=value parts, keeping quoted values whole: ADO
// toggles quoting at every double quote ("" inside quotes is a literal
// quote), ODBC quotes a value that starts with { up to the } that is not
// doubled.
func splitParts(s string, odbc bool) []string {
	var parts []string
	var cur strings.Builder
	rs := []rune(s)
	inQuote, inBrace, afterEq := false, false, false
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		switch {
		case odbc && inBrace:
			cur.WriteRune(c)
			if c == '}' {
				if i+1 < len(rs) && rs[i+1] == '}' {
					cur.WriteRune('}')
					i++
				} else {
					inBrace = false
				}
			}
			continue
		case !odbc && c == '"':
			if inQuote && i+1 < len(rs) && rs[i+1] == '"' {
				cur.WriteString(`""`)
				i++
				continue
			}
			inQuote = !inQuote
		case c == ';' && !inQuote:
			parts = append(parts, cur.String())
			cur.Reset()
			afterEq = false
			continue
		case odbc && c == '=' && !afterEq:
			afterEq = true
			cur.WriteRune(c)
			// A value that starts (after spaces) with { is braced.
			j := i + 1
			for j < len(rs) && unicode.IsSpace(rs[j]) {
				j++
			}
			if j < len(rs) && rs[j] == '{' {
				cur.WriteString(string(rs[i+1 : j+1]))
				i = j
				inBrace = true
			}
			continue
		}
		cur.WriteRune(c)
	}
	return append(parts, cur.String())
}

// keyValue reads one part as the driver would: key lower-cased, trimmed and
// mapped from its synonym; value trimmed and unquoted.
func keyValue(part string, odbc bool) (key, value string, ok bool) {
	k, v, found := strings.Cut(part, "=")
	if !found {
		return "", "", false
	}
	key = strings.ToLower(strings.TrimSpace(k))
	if key == "" {
		return "", "", false
	}
	switch key {
	case "pwd":
		key = "password"
	case "uid", "user":
		key = "user id"
	}
	value = strings.TrimSpace(v)
	switch {
	case odbc && strings.HasPrefix(value, "{") && strings.HasSuffix(value, "}") && len(value) >= 2:
		value = strings.ReplaceAll(value[1:len(value)-1], "}}", "}")
	case !odbc && strings.HasPrefix(value, `"`) && strings.HasSuffix(value, `"`) && len(value) >= 2:
		value = strings.ReplaceAll(value[1:len(value)-1], `""`, `"`)
	}
	return key, value, true
}
