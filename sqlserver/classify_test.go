package sqlserver_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"syscall"
	"testing"

	mssql "github.com/microsoft/go-mssqldb"
	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlserver"
)

func TestClassifyNumbers(t *testing.T) {
	for _, tc := range []struct {
		number    int32
		transient bool
		what      string
	}{
		{40613, true, "database not currently available"},
		{40501, true, "service busy"},
		{40197, true, "service error (failover)"},
		{40143, true, "service error"},
		{49918, true, "not enough resources"},
		{49919, true, "too many create/update operations"},
		{49920, true, "too many operations"},
		{4060, true, "cannot open database"},
		{4221, true, "read-secondary login waiting for versioning"},
		{10928, true, "resource limit"},
		{10929, true, "resource minimum guarantee"},
		{1205, true, "deadlock victim"},
		{1222, true, "lock request timeout"},
		{233, true, "connection closed before login"},
		{64, true, "connection lost during login"},
		{10053, true, "connection aborted"},
		{10054, true, "connection reset"},
		{10060, true, "connection timed out"},
		{18456, false, "login failed"},
		{2627, false, "unique constraint violation"},
		{2601, false, "unique index violation"},
		{547, false, "constraint conflict"},
		{208, false, "invalid object name"},
		{102, false, "syntax error"},
		{8115, false, "arithmetic overflow (a duration past MaxDuration)"},
		{229, false, "permission denied"},
	} {
		me := mssql.Error{Number: tc.number, Class: 16, Message: tc.what}
		for _, err := range []error{me, &me, fmt.Errorf("renew: %w", me), fmt.Errorf("outer: %w", fmt.Errorf("inner: %w", me))} {
			got := sqlserver.Classify(err)
			if errors.Is(got, sqlease.ErrTransient) != tc.transient {
				t.Errorf("Classify(%d %s via %T) transient = %v, want %v", tc.number, tc.what, err, !tc.transient, tc.transient)
			}
			var back mssql.Error
			var backp *mssql.Error
			if !(errors.As(got, &back) && back.Number == tc.number) && !(errors.As(got, &backp) && backp.Number == tc.number) {
				t.Errorf("Classify(%v) = %v lost the mssql.Error", err, got)
			}
			if !tc.transient && !same(got, err) {
				t.Errorf("Classify(%v) = %v, want it unchanged", err, got)
			}
		}
	}
}

// TestClassifyAllErrors: the driver describes the last error of a request
// and lists every one in All; a transient one anywhere counts.
func TestClassifyAllErrors(t *testing.T) {
	deadlock := mssql.Error{Number: 1205, Class: 13, Message: "deadlock victim"}
	last := mssql.Error{Number: 3998, Class: 16, Message: "uncommittable transaction"}
	last.All = []mssql.Error{deadlock, last}
	if err := sqlserver.Classify(last); !errors.Is(err, sqlease.ErrTransient) {
		t.Errorf("Classify(3998 after 1205) = %v, want transient", err)
	}
	dup := mssql.Error{Number: 3621, Message: "the statement has been terminated"}
	dup.All = []mssql.Error{{Number: 2627, Message: "violation of unique constraint"}, dup}
	if !sqlserver.IsUniqueViolation(fmt.Errorf("insert run: %w", dup)) {
		t.Errorf("IsUniqueViolation(3621 after 2627) = false")
	}
	if sqlserver.IsUniqueViolation(last) || sqlserver.IsUniqueViolation(errors.New("2627")) || sqlserver.IsUniqueViolation(nil) {
		t.Errorf("IsUniqueViolation true for an error that is not one")
	}
	for _, n := range []int32{2627, 2601} {
		if !sqlserver.IsUniqueViolation(mssql.Error{Number: n}) || !sqlserver.IsUniqueViolation(&mssql.Error{Number: n}) {
			t.Errorf("IsUniqueViolation(%d) = false", n)
		}
	}
}

func TestClassifyConnectionErrors(t *testing.T) {
	for _, tc := range []struct {
		err       error
		transient bool
	}{
		{driver.ErrBadConn, true},
		{fmt.Errorf("query: %w", driver.ErrBadConn), true},
		{io.EOF, true},
		{io.ErrUnexpectedEOF, true},
		{net.ErrClosed, true},
		{fmt.Errorf("write: %w", syscall.EPIPE), true},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("read: %w", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}), true},
		{&net.DNSError{Err: "no such host", Name: "db.example.com", IsTemporary: true}, true},
		{mssql.StreamError{InnerError: errors.New("bad token")}, true},
		{mssql.ServerError{}, true}, // a fatal server error closed the connection
		{context.Canceled, false},
		{context.DeadlineExceeded, false}, // also a net.Error: the caller's deadline is not the database's fault
		{fmt.Errorf("acquire: %w", context.DeadlineExceeded), false},
		{sql.ErrNoRows, false},
		{sql.ErrTxDone, false},
		{errors.New("plain"), false},
	} {
		got := sqlserver.Classify(tc.err)
		if errors.Is(got, sqlease.ErrTransient) != tc.transient {
			t.Errorf("Classify(%v) = %v, transient = %v, want %v", tc.err, got, !tc.transient, tc.transient)
		}
		if !reflect.TypeOf(tc.err).Comparable() {
			if !errors.As(got, new(mssql.ServerError)) {
				t.Errorf("Classify(%v) = %v lost the original error", tc.err, got)
			}
		} else if !errors.Is(got, tc.err) {
			t.Errorf("Classify(%v) = %v lost the original error", tc.err, got)
		}
		if !tc.transient && !same(got, tc.err) {
			t.Errorf("Classify(%v) = %v, want it unchanged", tc.err, got)
		}
	}
	once := sqlserver.Classify(io.EOF)
	if twice := sqlserver.Classify(once); !same(twice, once) {
		t.Errorf("Classify of a classified error = %v, want it unchanged (%v)", twice, once)
	}
}

// same reports whether a and b are the same error value; mssql.Error holds
// a slice, so it cannot be compared with ==.
func same(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	if reflect.TypeOf(a).Comparable() && reflect.TypeOf(b).Comparable() {
		return a == b
	}
	return reflect.DeepEqual(a, b)
}

// The store runs its own transaction again after these errors only
// (sqlstore.Dialect.RolledBack): SQL Server rolls the whole transaction
// back for a deadlock's victim (1205) and a snapshot update conflict
// (3960); a lock request timeout (1222) ends the statement alone, and a
// lost connection may have committed.
func TestRolledBack(t *testing.T) {
	d, err := sqlserver.Dialect("sqlease")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{mssql.Error{Number: 1205, Message: "deadlock victim"}, true},
		{fmt.Errorf("delete job: %w", mssql.Error{Number: 3960}), true},
		{mssql.Error{Number: 1222, Message: "lock request timeout"}, false},
		{mssql.Error{Number: 2627}, false},
		{io.EOF, false},
		{driver.ErrBadConn, false},
	} {
		if got := d.RolledBack(tc.err); got != tc.want {
			t.Errorf("RolledBack(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
