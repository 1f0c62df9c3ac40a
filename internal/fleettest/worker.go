package fleettest

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease/mysql"
	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/sqlite"
	"github.com/sqlease/sqlease/sqlstore"
)

// The environment of a worker: WorkerEnv=1 makes a test binary's TestMain
// run its worker (IsWorker); the worker reads its configuration (JSON) and
// its holder id with ReadConfig.
const (
	WorkerEnv = "SQLEASE_FLEET_WORKER"
	configEnv = "SQLEASE_FLEET_CONFIG"
	holderEnv = "SQLEASE_FLEET_HOLDER"
)

// Workers is a Fleet whose workers are configured by a C (a package's
// WorkerConfig, passed as JSON): each gets base, edited, and the holder id
// w<index>. Its methods must be called from the test goroutine.
type Workers[E any, P Event[E], C any] struct {
	*Fleet[E, P]
	base C
}

// NewWorkers returns an empty fleet of workers of configuration base; name
// prefixes its failure messages.
func NewWorkers[E any, P Event[E], C any](t testing.TB, name string, base C) *Workers[E, P, C] {
	return &Workers[E, P, C]{Fleet: New[E, P](t, name), base: base}
}

// Start launches n workers, waits until each reports ready, then tells them
// all to go at once.
func (w *Workers[E, P, C]) Start(n int, edit func(*C)) []*Proc {
	w.t.Helper()
	from := w.Mark()
	procs := make([]*Proc, n)
	for i := range procs {
		procs[i] = w.Launch(edit)
	}
	w.Go(from, procs...)
	return procs
}

// Launch starts one worker (holder w<index>) without telling it to go.
func (w *Workers[E, P, C]) Launch(edit func(*C)) *Proc {
	w.t.Helper()
	cfg := w.base
	if edit != nil {
		edit(&cfg)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		w.t.Fatalf("%s: %v", w.name, err)
	}
	holder := fmt.Sprintf("w%d", len(w.Procs()))
	return w.Fleet.Launch(holder, []string{WorkerEnv + "=1", configEnv + "=" + string(b), holderEnv + "=" + holder})
}

// IsWorker reports whether this process is a worker of a fleet: TestMain
// then runs the worker instead of the tests.
func IsWorker() bool { return os.Getenv(WorkerEnv) == "1" }

// WorkersMain is the TestMain of a package whose tests run worker fleets,
// returning the exit code for os.Exit: in a worker process it runs worker;
// otherwise the tests and then, with -v, what they measured (each line
// ending in suffix).
func WorkersMain(m *testing.M, worker func() int, measured *Timings, suffix string) int {
	if IsWorker() {
		return worker()
	}
	code := m.Run()
	if testing.Verbose() {
		measured.Fprint(os.Stdout, suffix)
	}
	return code
}

// ReadConfig decodes the worker's configuration into cfg (a pointer) and
// returns its holder id.
func ReadConfig(cfg any) (holder string, err error) {
	if err := json.Unmarshal([]byte(os.Getenv(configEnv)), cfg); err != nil {
		return "", fmt.Errorf("config: %w", err)
	}
	return os.Getenv(holderEnv), nil
}

// Out prints a worker's events on stdout: one JSON line per event, in a
// single write, so that lines of different goroutines never interleave and
// each reaches the pipe at once.
type Out struct{ mu sync.Mutex }

// Print prints ev (a worker's event type: fields ev, holder, t at least).
func (o *Out) Print(ev any) {
	b, err := json.Marshal(ev)
	if err != nil {
		b = []byte(fmt.Sprintf(`{"ev":%q,"t":%q,"err":%q}`, EvFatal, time.Now().Format(time.RFC3339Nano), err.Error()))
	}
	b = append(b, '\n')
	o.mu.Lock()
	defer o.mu.Unlock()
	_, _ = os.Stdout.Write(b)
}

// ReadCommands reads the worker's commands on stdin, one a line: CmdGo
// closes goCh (once); any other line is handed to handle as its first word
// and the rest. The end of input means the test process is gone: it then
// calls cancel.
func ReadCommands(goCh chan struct{}, cancel context.CancelFunc, handle func(cmd, arg string)) {
	var once sync.Once
	sc := bufio.NewScanner(os.Stdin)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		if cmd == CmdGo {
			once.Do(func() { close(goCh) })
			continue
		}
		handle(cmd, arg)
	}
	cancel()
}

// OpenStore opens the store of a dialect ("sqlite", "postgres" or "mysql";
// the migrations are the test's to apply) and pings it, so that a worker
// that says ready is connected.
func OpenStore(ctx context.Context, dialect, dsn, prefix string) (*sql.DB, *sqlstore.Store, error) {
	var db *sql.DB
	var st *sqlstore.Store
	var err error
	switch dialect {
	case "sqlite":
		if db, err = sqlite.Open(dsn); err == nil {
			st, err = sqlite.New(db, prefix)
		}
	case "postgres":
		if db, err = postgres.Open(dsn); err == nil {
			st, err = postgres.New(db, prefix)
		}
	case "mysql":
		if db, err = mysql.Open(dsn); err == nil {
			st, err = mysql.New(db, prefix)
		}
	default:
		err = fmt.Errorf("unknown dialect %q", dialect)
	}
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err = db.PingContext(pctx); err != nil {
			err = fmt.Errorf("ping: %w", err)
		}
		cancel()
	}
	if err != nil && db != nil {
		db.Close()
	}
	return db, st, err
}
