package sqlserver

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	mssql "github.com/microsoft/go-mssqldb"
	"github.com/microsoft/go-mssqldb/msdsn"
	"github.com/sqlease/sqlease"
)

// These tests need no server: they pin the advisory statements' text, the
// lock resource, the reading of sp_getapplock's return code, the
// configuration, and what a session does without touching its connection.
// advisory_test.go runs the statements on a server when one is configured.

const advPrefix = "qqzp"

func advQueries(t *testing.T) advisorySQL {
	t.Helper()
	q, err := advisoryQueries(advPrefix)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

var (
	advPlaceholderRE = regexp.MustCompile(`@@?\w+`)
	advOutputRE      = regexp.MustCompile(`(?m)^OUTPUT (.*?);?$`)
)

// TestAdvisoryPlaceholders: each statement takes exactly @p1…@pN for its
// documented arguments; the other @names are sp_getapplock's parameters and
// the lock batch's return-code variable, nothing else.
func TestAdvisoryPlaceholders(t *testing.T) {
	q := advQueries(t)
	allowed := []string{"@r", "@Resource", "@LockMode", "@LockOwner", "@LockTimeout"}
	for name, tc := range map[string]struct {
		text string
		args int
	}{
		"lock": {q.lock, 2}, "holds": {q.holds, 1}, "takeover": {q.takeover, 4}, "renew": {q.renew, 5}, "release": {q.release, 1},
	} {
		seen := map[int]bool{}
		for _, m := range advPlaceholderRE.FindAllString(tc.text, -1) {
			if n, err := strconv.Atoi(strings.TrimPrefix(m, "@p")); strings.HasPrefix(m, "@p") && err == nil {
				seen[n] = true
				continue
			}
			if !slices.Contains(allowed, m) {
				t.Errorf("%s: unexpected variable %s:\n%s", name, m, tc.text)
			}
		}
		got := slices.Sorted(maps.Keys(seen))
		var want []int
		for n := 1; n <= tc.args; n++ {
			want = append(want, n)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s uses placeholders %v, want @p1…@p%d:\n%s", name, got, tc.args, tc.text)
		}
		if strings.ContainsAny(tc.text, "?$") {
			t.Errorf("%s contains ? or $, another dialect's placeholder", name)
		}
	}
}

// TestAdvisoryLockStatements: an exclusive, session-owned application lock
// with a bounded wait, its return code selected; a release that is also
// session-owned and skipped when nothing is held.
func TestAdvisoryLockStatements(t *testing.T) {
	q := advQueries(t)
	for _, want := range []string{
		"DECLARE @r int;",
		"EXEC @r = sp_getapplock @Resource = @p1, @LockMode = 'Exclusive', @LockOwner = 'Session', @LockTimeout = @p2;",
		"SELECT @r;",
	} {
		if !strings.Contains(q.lock, want) {
			t.Errorf("lock lacks %q:\n%s", want, q.lock)
		}
	}
	if q.holds != "SELECT APPLOCK_MODE('public', @p1, 'Session')" {
		t.Errorf("holds = %q", q.holds)
	}
	for _, want := range []string{"IF APPLOCK_MODE('public', @p1, 'Session') <> 'NoLock'", "EXEC sp_releaseapplock @Resource = @p1, @LockOwner = 'Session';"} {
		if !strings.Contains(q.release, want) {
			t.Errorf("release lacks %q:\n%s", want, q.release)
		}
	}
	// The lock wait must be bounded: the statement takes it as a
	// parameter, and Lock never asks for more than lockWait.
	if lockWait <= 0 || lockWait > 5*time.Second {
		t.Errorf("lockWait = %s", lockWait)
	}
}

// TestAdvisoryTakeover: Acquire's MERGE under the same hints and column
// layout, but taking over whatever the expiry, bumping the epoch (1 on
// insert), and with an empty source unless the session holds the lock.
func TestAdvisoryTakeover(t *testing.T) {
	q := advQueries(t)
	d, err := Dialect(advPrefix)
	if err != nil {
		t.Fatal(err)
	}
	acq := d.Queries.Acquire
	for _, want := range []string{
		"MERGE INTO [" + advPrefix + "_leases] WITH (UPDLOCK, HOLDLOCK) AS l",
		"SELECT @p1 AS lease_name, @p2 AS holder_id, n.now, " + addMS(msParam("@p3"), "n.now") + " AS expires_at",
		"FROM (SELECT SYSUTCDATETIME() AS now) AS n\n\tWHERE APPLOCK_MODE('public', @p4, 'Session') = 'Exclusive'\n) AS s",
		"ON l.lease_name = s.lease_name",
		"WHEN MATCHED AND (l.lease_locked = 1 OR l.expires_at <= s.now) THEN UPDATE SET",
		"lease_epoch = l.lease_epoch + 1",
		"WHEN NOT MATCHED THEN",
		"\tlease_locked = 1\nWHEN NOT MATCHED",
		"VALUES (s.lease_name, s.holder_id, 1, s.now, s.now, s.expires_at, 1)",
	} {
		if !strings.Contains(q.takeover, want) {
			t.Errorf("takeover lacks %q:\n%s", want, q.takeover)
		}
	}
	// The expiry matters only for a term acquired without the lock.
	if strings.Count(q.takeover, "expires_at <=") != 1 || strings.Contains(q.takeover, "expires_at >") {
		t.Errorf("takeover depends on the expiry other than for a lockless term:\n%s", q.takeover)
	}
	if !strings.Contains(acq, "\tlease_locked = 0\nWHEN NOT MATCHED") {
		t.Errorf("Acquire does not mark its term as acquired without the lock:\n%s", acq)
	}
	if strings.Count(q.takeover, "SYSUTCDATETIME()") != 1 {
		t.Errorf("takeover reads the clock %d times, want 1", strings.Count(q.takeover, "SYSUTCDATETIME()"))
	}
	if !strings.HasSuffix(q.takeover, ";") {
		t.Errorf("takeover: a MERGE must end with a semicolon")
	}
	// Same columns in, same columns out as Acquire, which sqlstore scans.
	for _, line := range []string{
		"\tholder_id = s.holder_id,\n\tlease_epoch = l.lease_epoch + 1,\n\tacquired_at = s.now,\n\trenewed_at = s.now,\n\texpires_at = s.expires_at,\n",
	} {
		if !strings.Contains(acq, line) || !strings.Contains(q.takeover, line) {
			t.Errorf("takeover and Acquire differ in %q", line)
		}
	}
	out, acqOut := advOutputRE.FindStringSubmatch(q.takeover), advOutputRE.FindStringSubmatch(acq)
	if out == nil || acqOut == nil || out[1] != acqOut[1] ||
		out[1] != "inserted.lease_epoch, inserted.acquired_at, inserted.renewed_at, inserted.expires_at, inserted.acquired_at" {
		t.Errorf("takeover OUTPUT %q, Acquire OUTPUT %q", out, acqOut)
	}
	if strings.Count(q.takeover, "OUTPUT ") != 1 {
		t.Errorf("takeover has %d OUTPUT clauses", strings.Count(q.takeover, "OUTPUT "))
	}
}

// TestAdvisoryRenew: the store's Renew statement unchanged, plus the lock
// check in the same WHERE.
func TestAdvisoryRenew(t *testing.T) {
	q := advQueries(t)
	d, err := Dialect(advPrefix)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Replace(d.Queries.Renew, "SET renewed_at", "SET lease_locked = 1, renewed_at", 1) +
		"\n\tAND APPLOCK_MODE('public', @p5, 'Session') = 'Exclusive'"; q.renew != want || !strings.Contains(q.renew, "lease_locked = 1") {
		t.Errorf("renew =\n%s\nwant\n%s", q.renew, want)
	}
	for _, want := range []string{
		"FROM [" + advPrefix + "_leases] AS l WITH (UPDLOCK, HOLDLOCK)",
		"WHERE l.lease_name = @p1 AND l.holder_id = @p2 AND l.lease_epoch = @p3 AND l.expires_at > n.now",
		"OUTPUT inserted.acquired_at, inserted.renewed_at, inserted.expires_at, inserted.renewed_at",
		"CAST(@p4 AS bigint)) / 1000 AS int)",
	} {
		if !strings.Contains(q.renew, want) {
			t.Errorf("renew lacks %q:\n%s", want, q.renew)
		}
	}
	// The check is part of the WHERE clause, not a trailing statement.
	if i, j := strings.Index(q.renew, "WHERE "), strings.Index(q.renew, "APPLOCK_MODE"); i < 0 || j < i || strings.Contains(q.renew[i:], ";") {
		t.Errorf("renew's lock check is not in its WHERE clause:\n%s", q.renew)
	}
}

func TestLockResource(t *testing.T) {
	if got := LockResource("sqlease", "leader"); got != "sqlease:sqlease:leader" {
		t.Errorf("LockResource = %q", got)
	}
	if LockResource("a", "x") != LockResource("a", "x") {
		t.Error("not deterministic")
	}
	seen := map[string]string{}
	for _, pl := range [][2]string{{"a", "x"}, {"b", "x"}, {"a", "y"}, {"a_b", "c"}, {"a", "b:c"}, {"ab", "c"}} {
		r := LockResource(pl[0], pl[1])
		if other, dup := seen[r]; dup {
			t.Errorf("%v and %s share resource %q", pl, other, r)
		}
		seen[r] = fmt.Sprint(pl)
	}
	// The longest valid names fit unhashed.
	longest := LockResource(strings.Repeat("p", 31), strings.Repeat("l", sqlease.MaxNameLen))
	if sqlease.ValidateTablePrefix(strings.Repeat("p", 31)) != nil || sqlease.ValidateLeaseName(strings.Repeat("l", sqlease.MaxNameLen)) != nil {
		t.Fatal("the longest valid names are not valid")
	}
	if len(longest) != 168 || strings.Contains(longest, "#") {
		t.Errorf("longest valid resource %q (%d), want 168 characters unhashed", longest, len(longest))
	}
	// Longer ones are cut and hashed: within 255 UTF-16 code units, and
	// distinct where the server's truncation to 255 would not be.
	common := strings.Repeat("x", 300)
	a, b := LockResource("p", common+"a"), LockResource("p", common+"b")
	if a == b || utf16Len(a) > maxResource || utf16Len(b) > maxResource || !strings.HasPrefix(a, "sqlease:p:xxx") {
		t.Errorf("long names: %q (%d) and %q (%d)", a, utf16Len(a), b, utf16Len(b))
	}
	if !regexp.MustCompile(`#[0-9a-f]{32}$`).MatchString(a) || a != LockResource("p", common+"a") {
		t.Errorf("hashed resource %q does not end in #<32 hex> or is not stable", a)
	}
	// A name exactly at the limit is kept; one unit more is hashed.
	at := strings.Repeat("y", maxResource-len("sqlease:p:"))
	if LockResource("p", at) != "sqlease:p:"+at || !strings.Contains(LockResource("p", at+"y"), "#") {
		t.Error("the 255-unit boundary is off")
	}
	// Characters outside the BMP count twice and are never split.
	emoji := LockResource("p", strings.Repeat("😀", 200))
	if utf16Len(emoji) > maxResource || !utf8.ValidString(emoji) || !strings.Contains(emoji, "#") {
		t.Errorf("emoji resource %q: %d units", emoji, utf16Len(emoji))
	}
	if utf16Len("a😀") != 3 {
		t.Errorf("utf16Len(a😀) = %d, want 3", utf16Len("a😀"))
	}
}

func TestApplockResult(t *testing.T) {
	for _, tc := range []struct {
		code           int
		granted, isErr bool
		transient      bool
	}{
		{0, true, false, false},
		{1, true, false, false},
		{-1, false, false, false}, // timed out: wait again
		{-2, false, true, true},
		{-3, false, true, true},
		{-999, false, true, false},
		{2, false, true, false},
		{-4, false, true, false},
	} {
		granted, err := applockResult(tc.code)
		if granted != tc.granted || (err != nil) != tc.isErr || errors.Is(err, sqlease.ErrTransient) != tc.transient {
			t.Errorf("applockResult(%d) = (%v, %v), want granted %v, error %v, transient %v", tc.code, granted, err, tc.granted, tc.isErr, tc.transient)
		}
		if err != nil && !strings.Contains(err.Error(), strconv.Itoa(tc.code)) {
			t.Errorf("applockResult(%d): %v does not name the code", tc.code, err)
		}
	}
}

func TestAdvisoryConfig(t *testing.T) {
	const url = "sqlserver://sa:S3cret@127.0.0.1:1433?database=app"
	for _, p := range []string{"", "Bad", "a-b", strings.Repeat("a", 32)} {
		if _, err := NewLocker(AdvisoryConfig{DSN: url, Prefix: p}); !errors.Is(err, sqlease.ErrInvalidName) {
			t.Errorf("prefix %q: %v, want ErrInvalidName", p, err)
		}
	}
	for _, dsn := range []string{"", "  ", "sqlserver://sa:S3cret@[::1", url + "&timezone=Europe/Paris", url + "&keepAlive=abc", "server=db;port=notaport"} {
		_, err := NewLocker(AdvisoryConfig{DSN: dsn, Prefix: "app"})
		if !errors.Is(err, sqlease.ErrInvalidConfig) {
			t.Errorf("DSN %q: %v, want ErrInvalidConfig", dsn, err)
		}
		if err != nil && strings.Contains(err.Error(), "S3cret") {
			t.Errorf("DSN %q: the error shows the password: %v", dsn, err)
		}
	}
	if _, err := NewLocker(AdvisoryConfig{DSN: url, Prefix: "app", Resource: strings.Repeat("r", 256)}); !errors.Is(err, sqlease.ErrInvalidConfig) {
		t.Errorf("resource of 256: %v, want ErrInvalidConfig", err)
	}
	l, err := newLocker(AdvisoryConfig{DSN: url, Prefix: "app", Resource: strings.Repeat("r", 255)})
	if err != nil || l.resource != strings.Repeat("r", 255) || l.interval != 250*time.Millisecond {
		t.Errorf("resource of 255: %+v %v", l, err)
	}
	if l, err := newLocker(AdvisoryConfig{DSN: url, Prefix: "app", CheckInterval: time.Second}); err != nil || l.interval != time.Second {
		t.Errorf("CheckInterval 1s: %+v %v", l, err)
	}
}

// TestAdvisoryKeepAlive: the locker's connection string carries keepAlive
// (default 5 s) in each form, the rest of the string reads as before, and a
// keepAlive the string sets is kept.
func TestAdvisoryKeepAlive(t *testing.T) {
	for _, tc := range []struct {
		dsn  string
		ka   time.Duration
		want time.Duration
	}{
		{"sqlserver://sa:p%40ss%3Aw@db.example.com:1433/inst?database=app", 0, 5 * time.Second},
		{"sqlserver://db.example.com", 0, 5 * time.Second},
		{"sqlserver://srv.database.windows.net?database=app&fedauth=ActiveDirectoryDefault", 0, 5 * time.Second},
		{"server=db;user id=sa;password=\"a;b\"\"c\";database=app;", 12 * time.Second, 12 * time.Second},
		{"server=db;database=app  ", 1500 * time.Millisecond, 2 * time.Second},
		{"odbc:server=db;uid=sa;pwd={S3c;ret}}x};database=app", 0, 5 * time.Second},
		{"odbc:server=db;database=app;pwd={x;}", 0, 5 * time.Second},
		{"sqlserver://db?database=app&keepAlive=30", 0, 30 * time.Second},
		{"sqlserver://db?database=app&KEEPALIVE=0", 7 * time.Second, 0},
		{"server=db;KeepAlive=17", 0, 17 * time.Second},
	} {
		l, err := newLocker(AdvisoryConfig{DSN: tc.dsn, Prefix: "app", Keepalive: tc.ka})
		if err != nil {
			t.Errorf("%q: %v", tc.dsn, err)
			continue
		}
		before, err1 := msdsn.Parse(tc.dsn)
		after, err2 := msdsn.Parse(l.dsn)
		if err1 != nil || err2 != nil {
			t.Errorf("%q -> %q: %v %v", tc.dsn, l.dsn, err1, err2)
			continue
		}
		if after.KeepAlive != tc.want {
			t.Errorf("%q -> %q: keepAlive %s, want %s", tc.dsn, l.dsn, after.KeepAlive, tc.want)
		}
		delete(before.Parameters, msdsn.KeepAlive)
		delete(after.Parameters, msdsn.KeepAlive)
		if !maps.Equal(before.Parameters, after.Parameters) || before.Password != after.Password || before.Host != after.Host ||
			before.Database != after.Database || before.Instance != after.Instance || before.User != after.User {
			t.Errorf("%q -> %q: the rest of the string changed:\n%v\n%v", tc.dsn, l.dsn, before.Parameters, after.Parameters)
		}
		if UsesEntraID(tc.dsn) != UsesEntraID(l.dsn) {
			t.Errorf("%q -> %q: Entra ID changed", tc.dsn, l.dsn)
		}
	}
}

// TestNewLockerDoesNotConnect: NewLocker only checks; a session connects
// when it is opened, and an open that fails leaves nothing behind.
func TestNewLockerDoesNotConnect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			c.Close() // no TDS: the login fails
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	locker, err := NewLocker(AdvisoryConfig{DSN: fmt.Sprintf("sqlserver://sa:pw@127.0.0.1:%d?database=x&dial+timeout=2", port), Prefix: "app"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-accepted:
		t.Fatal("NewLocker connected")
	case <-time.After(100 * time.Millisecond):
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lock, err := locker(ctx, "adv")
	if err == nil {
		lock.Close(ctx)
		t.Fatal("a session opened on a listener that speaks no TDS")
	}
	select {
	case <-accepted:
	default:
		t.Fatalf("opening a session did not connect: %v", err)
	}
	if _, err := locker(ctx, "Not valid!"); !errors.Is(err, sqlease.ErrInvalidName) {
		t.Errorf("invalid lease name: %v, want ErrInvalidName", err)
	}
}

// fakeSession is a session whose connection must not be used.
func fakeSession() *session {
	return newSession(nil, nil, 7, "adv", LockResource("app", "adv"), time.Hour, advisorySQL{})
}

// TestLostSessionRefuses: once lost, the session answers ErrSessionLost
// without a statement, naming why.
func TestLostSessionRefuses(t *testing.T) {
	s := fakeSession()
	select {
	case <-s.Lost():
		t.Fatal("Lost closed on a new session")
	default:
	}
	s.lose(errors.New("killed by test"))
	s.lose(errors.New("second cause ignored"))
	<-s.Lost()
	ctx := context.Background()
	tok := sqlease.Token{Name: "adv", Holder: "h", Epoch: 3}
	if _, err := s.Renew(ctx, tok, time.Second); !errors.Is(err, sqlease.ErrSessionLost) || !strings.Contains(err.Error(), "killed by test") {
		t.Errorf("Renew on a lost session: %v", err)
	}
	if _, err := s.Takeover(ctx, "adv", "h", time.Second); !errors.Is(err, sqlease.ErrSessionLost) {
		t.Errorf("Takeover on a lost session: %v", err)
	}
	if err := s.Lock(ctx); !errors.Is(err, sqlease.ErrSessionLost) {
		t.Errorf("Lock on a lost session: %v", err)
	}
}

// TestSessionValidates: arguments are checked before any statement, and a
// session serves only the lease it was opened for.
func TestSessionValidates(t *testing.T) {
	s := fakeSession()
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"takeover other lease", second(s.Takeover(ctx, "other", "h", time.Second)), sqlease.ErrInvalidConfig},
		{"takeover bad name", second(s.Takeover(ctx, "bad name", "h", time.Second)), sqlease.ErrInvalidName},
		{"takeover bad holder", second(s.Takeover(ctx, "adv", "", time.Second)), sqlease.ErrInvalidName},
		{"takeover ttl", second(s.Takeover(ctx, "adv", "h", 0)), sqlease.ErrInvalidConfig},
		{"renew other lease", second(s.Renew(ctx, sqlease.Token{Name: "other", Holder: "h", Epoch: 1}, time.Second)), sqlease.ErrInvalidConfig},
		{"renew epoch 0", second(s.Renew(ctx, sqlease.Token{Name: "adv", Holder: "h"}, time.Second)), sqlease.ErrInvalidName},
		{"renew ttl", second(s.Renew(ctx, sqlease.Token{Name: "adv", Holder: "h", Epoch: 1}, time.Microsecond)), sqlease.ErrInvalidConfig},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
}

func second(_ sqlease.Lease, err error) error { return err }

// TestExecHonoursContext: a statement waiting for the connection gives up
// when its context ends, and when the session is lost meanwhile.
func TestExecHonoursContext(t *testing.T) {
	s := fakeSession()
	s.sem <- struct{}{} // another statement runs
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.exec(ctx, func(context.Context, *sql.Conn) error { return errors.New("ran") }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("exec while busy, ctx ends: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		done <- s.exec(context.Background(), func(context.Context, *sql.Conn) error { return errors.New("ran") })
	}()
	time.Sleep(10 * time.Millisecond)
	s.lose(errors.New("gone"))
	if err := <-done; !errors.Is(err, sqlease.ErrSessionLost) {
		t.Errorf("exec while busy, session lost: %v", err)
	}
}

// TestBroken: errors after which the connection is not the session that
// took the lock, and errors that leave it so.
func TestBroken(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{context.Canceled, true},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{sql.ErrConnDone, true},
		{driver.ErrBadConn, true},
		{io.EOF, true},
		{&net.OpError{Op: "read", Err: errors.New("reset")}, true},
		{mssql.StreamError{InnerError: errors.New("bad token")}, true},
		{mssql.Error{Number: 1205, Message: "deadlock"}, false},
		{mssql.Error{Number: 229, Message: "permission denied"}, false},
		{errors.New("something else"), false},
	} {
		if got := broken(tc.err); got != tc.want {
			t.Errorf("broken(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	s := fakeSession()
	if err := s.fail(mssql.Error{Number: 1205}); errors.Is(err, sqlease.ErrSessionLost) || !errors.Is(err, sqlease.ErrTransient) {
		t.Errorf("fail(deadlock) = %v, want transient, session kept", err)
	}
	select {
	case <-s.Lost():
		t.Error("a deadlock lost the session")
	default:
	}
	if err := s.fail(io.EOF); !errors.Is(err, sqlease.ErrSessionLost) || !errors.Is(err, io.EOF) {
		t.Errorf("fail(EOF) = %v", err)
	}
	<-s.Lost()
	if !isLockTimeout(mssql.Error{Number: 1222}) || isLockTimeout(mssql.Error{Number: 1205}) || isLockTimeout(io.EOF) {
		t.Error("isLockTimeout")
	}
}
