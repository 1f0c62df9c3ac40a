package pgtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// replicaSettings are appended to a replica's postgresql.conf, after the
// primary's (copied by pg_basebackup): the later line wins.
const replicaSettings = `
# --- pgtest replica ---
unix_socket_directories = '%s'
hot_standby = on
wal_receiver_status_interval = 1s
`

// StartReplica starts an asynchronous streaming replica of s (a server from
// Start; its default wal_level, replica, and max_wal_senders suffice): a
// pg_basebackup -R of s in a fresh directory, started on a free port as a
// hot standby. It is stopped and removed with the test, like a server from
// Start. Cut the replication with CutReplication, promote it with Promote;
// WaitReplayed waits until it has replayed everything s has written.
func (s *Server) StartReplica(t testing.TB) *Server {
	t.Helper()
	begin := time.Now()
	r := newServer(t, s.binDir, "replica")
	dir := r.dir
	// -R writes primary_conninfo and standby.signal; -X stream copies the
	// WAL written during the copy; -N: no fsync (a throwaway server).
	out, err := r.command("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", osUser,
		"-D", r.dataDir, "-R", "-X", "stream", "-N").CombinedOutput()
	if err != nil {
		t.Fatalf("pgtest: pg_basebackup failed: %v\n%s", err, out)
	}
	if err := r.appendConf(replicaSettings); err != nil {
		t.Fatalf("pgtest: writing the replica's postgresql.conf: %v", err)
	}
	r.listen(t)
	r.waitStreaming(t)
	t.Logf("pgtest: replica of port %d streaming on port %d in %v (dir %s)", s.port, r.port, time.Since(begin).Round(time.Millisecond), dir)
	return r
}

// Port returns the server's TCP port on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// query runs one statement on the server as the superuser and scans its
// single row into dest.
func (s *Server) query(ctx context.Context, sql string, dest ...any) error {
	conn, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if len(dest) == 0 {
		_, err = conn.Exec(ctx, sql)
		return err
	}
	return conn.QueryRow(ctx, sql).Scan(dest...)
}

// waitStreaming waits until the replica's WAL receiver streams.
func (s *Server) waitStreaming(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(readyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var n int
		err := s.query(ctx, `SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'`, &n)
		cancel()
		if err == nil && n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pgtest: the replica on port %d does not stream (%v)\n%s", s.port, err, readFrom(s.logPath, 0))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// WaitReplayed waits until the replica s has replayed every WAL record
// primary had inserted when it was called (also commits not yet flushed:
// pgtest servers run with synchronous_commit off, and the WAL writer
// flushes them within wal_writer_delay). It writes a record of its own
// (a logical decoding message, which needs no table) and waits for it: the
// insert position of an idle primary may lie past a page header that no
// replayed record ends at, until the next record (up to 15 s later).
func (s *Server) WaitReplayed(t testing.TB, primary *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var lsn string
	if err := primary.query(ctx, `SELECT pg_logical_emit_message(false, 'pgtest', '')::text`, &lsn); err != nil {
		t.Fatalf("pgtest: reading the primary's WAL position: %v", err)
	}
	for {
		var ok bool
		err := s.query(ctx, `SELECT pg_last_wal_replay_lsn() >= '`+lsn+`'::pg_lsn`, &ok)
		if err == nil && ok {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("pgtest: the replica on port %d has not replayed up to %s: %v", s.port, lsn, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// CutReplication stops the replica's WAL receiver and keeps it from
// reconnecting (primary_conninfo emptied and reloaded), as a network cut
// between the members would: the replica keeps what it has replayed and
// the primary goes on writing alone.
func (s *Server) CutReplication(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, q := range []string{`ALTER SYSTEM SET primary_conninfo = ''`, `SELECT pg_reload_conf()`} {
		if err := s.query(ctx, q); err != nil {
			t.Fatalf("pgtest: cutting replication: %s: %v", q, err)
		}
	}
	for {
		var n int
		err := s.query(ctx, `SELECT count(*) FROM pg_stat_wal_receiver`, &n)
		if err == nil && n == 0 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("pgtest: the replica's WAL receiver on port %d did not stop: %v", s.port, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Promote promotes the replica s to a primary (pg_promote, waiting for the
// end of recovery) and returns its new timeline.
func (s *Server) Promote(t testing.TB) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var ok bool
	if err := s.query(ctx, `SELECT pg_promote(true, 60)`, &ok); err != nil || !ok {
		t.Fatalf("pgtest: promoting the replica on port %d: %v (promoted: %v)\n%s", s.port, err, ok, readFrom(s.logPath, 0))
	}
	var name string
	if err := s.query(ctx, `SELECT pg_walfile_name(pg_current_wal_lsn())`, &name); err != nil {
		t.Fatalf("pgtest: reading the promoted server's timeline: %v", err)
	}
	tl, err := strconv.ParseInt(name[:8], 16, 64)
	if err != nil {
		t.Fatalf("pgtest: WAL file name %q: %v", name, err)
	}
	return int(tl)
}

// Kill kills the server as kill -9 would, and its backends with it (a
// SIGKILL of the postmaster alone would leave them serving their
// connections): the postmaster is stopped first so that it forks no more,
// then every child and the postmaster are killed. Nothing is flushed or
// sent to replicas; the data directory is left as a crash leaves it.
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	b, err := os.ReadFile(filepath.Join(s.dataDir, "postmaster.pid"))
	if err != nil {
		t.Fatalf("pgtest: reading postmaster.pid: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		t.Fatalf("pgtest: postmaster.pid: %v", err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("pgtest: stopping postmaster %d: %v", pid, err)
	}
	children, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, f := range strings.Fields(string(children)) {
		if c, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(c, syscall.SIGKILL)
		}
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	select {
	case <-s.proc.done:
	case <-time.After(stopTimeout):
		t.Fatalf("pgtest: postmaster %d did not die", pid)
	}
	s.proc.ctl.Close()
	s.proc = nil
}
