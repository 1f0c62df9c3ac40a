package scheduler_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	msqlite "modernc.org/sqlite"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlite"
	"github.com/sqlease/sqlease/sqlstore"
)

// A job created through another pool (another process, no change feed)
// while a claim-mode worker idles runs when it falls due, not at the
// worker's next poll: the idle poll's claim tells when the next job falls
// due (JobQueries.ClaimPeek), and the worker sleeps until then.
//
// The scenario fixes the poll grid: a first job due at once runs at a poll
// (p0), the worker's polls then come about every PollInterval after it,
// and the job under test falls due half a poll after the next one. A
// worker that learns nothing at its idle polls runs it half a poll late.
// PostgreSQL's claim does not peek: its worker learns of the new job from
// the change feed (postgres.ListenJobs, as sqlease serve wires it), and
// is held to the same bound.
func TestClaimIdlePollLearnsNextDue(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, open dbtest.Open) {
		ctx := context.Background()
		st, other := open(t), open(t) // two pools on one database
		var changes <-chan struct{}
		if strings.HasSuffix(t.Name(), "/postgres") {
			url := dbtest.PostgresURL(t)
			st, other = dbtest.OpenPostgres(t, url), dbtest.OpenPostgres(t, url)
			lctx, cancel := context.WithCancel(ctx)
			t.Cleanup(cancel)
			var err error
			if changes, err = postgres.ListenJobs(lctx, url, dbtest.Prefix, nil); err != nil {
				t.Fatal(err)
			}
		} else if st.Dialect().Jobs.ClaimPeek == "" {
			t.Fatal("the dialect has no ClaimPeek")
		}
		const poll = time.Second
		type call struct {
			job     string
			at, due time.Time
		}
		calls := make(chan call, 4)
		rec := &recorder{fn: func(_ context.Context, r sqlease.Run) error {
			calls <- call{r.Job, time.Now(), r.ScheduledFor}
			return nil
		}}
		defer runClaim(t, newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: rec.handle, PollInterval: poll, Changes: changes}))()
		api := newSched(t, scheduler.Config{Store: other})
		ran := func(want string) call {
			t.Helper()
			select {
			case c := <-calls:
				if c.job != want {
					t.Fatalf("%s ran, want %s", c.job, want)
				}
				return c
			case <-time.After(10 * poll):
				t.Fatalf("%s did not run within %s (poll interval %s)", want, 10*poll, poll)
			}
			return call{}
		}

		if _, _, err := api.Create(ctx, sqlease.Job{Name: "mark"}); err != nil {
			t.Fatal(err)
		}
		p0 := ran("mark").at
		// Past the claims the worker makes right after one that found a
		// job: the job below is created while it idles.
		time.Sleep(200 * time.Millisecond)
		// The database runs on this machine: one clock.
		due := p0.Add(poll + poll/2)
		if _, _, err := api.Create(ctx, sqlease.Job{Name: "later", Schedule: sqlease.Schedule{At: due}}); err != nil {
			t.Fatal(err)
		}
		c := ran("later")
		lag := c.at.Sub(c.due)
		t.Logf("later ran %s after it fell due (poll interval %s)", lag, poll)
		if lag < 0 || lag > 250*time.Millisecond {
			t.Errorf("later ran %s after it fell due, want within 250ms and never before (poll interval %s: the idle poll before it learnt nothing?)", lag, poll)
		}
	})
}

// An idle claim-mode worker on SQLite makes one statement per poll, as
// before the idle poll learnt the next due time: the claim's read
// (ClaimPeek), no NextDue, and no write (no turn at the write lock).
func TestClaimIdlePollStatements(t *testing.T) {
	ctx := context.Background()
	c, err := msqlite.NewConnector(sqlite.DSN(filepath.Join(t.TempDir(), "sqlease.db"), 0))
	if err != nil {
		t.Fatal(err)
	}
	cc := &countingConnector{Connector: c}
	st, err := sqlstore.OpenFor(ctx, dbtest.Prefix, sqlite.Dialect, func() (*sql.DB, error) { return sql.OpenDB(cc), nil })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.DB().Close() })
	const poll = 100 * time.Millisecond
	defer runClaim(t, newSched(t, scheduler.Config{Store: st, Holder: "w", Handler: (&recorder{}).handle, PollInterval: poll, RunRetention: -1}))()
	time.Sleep(3 * poll) // past the first claims
	cc.reset()
	const window = 30 * poll
	time.Sleep(window)
	got := cc.take()
	polls := int(window / poll)
	// The overlap allow occurrences' read every occurrenceScanPolls (10)
	// polls comes on top.
	most := polls + polls/10 + 2
	t.Logf("idle worker, %d polls: %d statements: %v", polls, len(got), summarize(got))
	if len(got) > most {
		t.Errorf("an idle worker made %d statements in %d polls, want at most %d (one claim a poll, the occurrences' read every 10)", len(got), polls, most)
	}
	if len(got) < polls/2 {
		t.Errorf("an idle worker made %d statements in %d polls: is it polling?", len(got), polls)
	}
	for _, q := range got {
		if q == st.Dialect().Jobs.NextDue {
			t.Errorf("an idle worker asked NextDue: a statement more a poll")
			break
		}
		if !strings.HasPrefix(strings.TrimSpace(q), "SELECT") {
			t.Errorf("an idle worker wrote: %.80s", q)
			break
		}
	}
}

// summarize counts statements by their first words.
func summarize(qs []string) map[string]int {
	out := map[string]int{}
	for _, q := range qs {
		f := strings.Fields(q)
		out[strings.Join(f[:min(len(f), 4)], " ")]++
	}
	return out
}

// countingConnector records the text of every statement its connections
// run (prepared statements at each execution, transactions as BEGIN and
// COMMIT or ROLLBACK).
type countingConnector struct {
	driver.Connector
	mu sync.Mutex
	qs []string
}

func (c *countingConnector) add(q string) {
	c.mu.Lock()
	c.qs = append(c.qs, q)
	c.mu.Unlock()
}

func (c *countingConnector) reset() { c.take() }

func (c *countingConnector) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	qs := c.qs
	c.qs = nil
	return qs
}

func (c *countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, c: c}, nil
}

// countingConn passes every call to the driver's connection, recording
// the statements. database/sql uses these interfaces of the driver's.
type countingConn struct {
	driver.Conn
	c *countingConnector
}

func (k *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	k.c.add("BEGIN")
	tx, err := k.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return countingTx{tx, k.c}, nil
}

func (k *countingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	k.c.add(q)
	return k.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (k *countingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	k.c.add(q)
	return k.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (k *countingConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	s, err := k.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	return countingStmt{s, q, k.c}, nil
}

type countingTx struct {
	driver.Tx
	c *countingConnector
}

func (t countingTx) Commit() error   { t.c.add("COMMIT"); return t.Tx.Commit() }
func (t countingTx) Rollback() error { t.c.add("ROLLBACK"); return t.Tx.Rollback() }

type countingStmt struct {
	driver.Stmt
	q string
	c *countingConnector
}

func (s countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.c.add(s.q)
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.c.add(s.q)
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}
