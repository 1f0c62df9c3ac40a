package e2e

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sqlease/sqlease/postgres"
	"github.com/sqlease/sqlease/sqlite"
)

// checkpointScript is a job's exec action in bash: it resumes its count
// from $SQLEASE_CHECKPOINT, saves three more counts through its node's API
// with its attempt's token and epoch, logging what it got and the answer
// of each save to the file $1, then sleeps (the test decides its end).
const checkpointScript = `#!/usr/bin/env bash
log=$1
n=$(printf '%s' "$SQLEASE_CHECKPOINT" | sed -n 's/.*"n":\([0-9]*\).*/\1/p')
n=${n:-0}
echo "start $SQLEASE_ATTEMPT $SQLEASE_EPOCH $SQLEASE_HOLDER $SQLEASE_RUN_TOKEN ${SQLEASE_CHECKPOINT:-none}" >> "$log"
for i in 1 2 3; do
	n=$((n + 1))
	code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT "$SQLEASE_API/v1/jobs/$SQLEASE_JOB/checkpoint" \
		-H "Authorization: Bearer $SQLEASE_RUN_TOKEN" -H "Sqlease-Epoch: $SQLEASE_EPOCH" \
		-H 'Content-Type: application/json' --data "{\"n\":$n}")
	echo "saved $SQLEASE_ATTEMPT $n $code" >> "$log"
done
echo "my token: $SQLEASE_RUN_TOKEN"
sleep 120
`

// attemptLog is what checkpointScript logged of one attempt.
type attemptLog struct {
	epoch      int64
	holder     string
	token      string
	checkpoint string   // "none" on a first attempt
	saves      []string // "n code"
}

// waitSaves waits up to timeout for attempt to have saved its three
// checkpoints in the log at path, and returns its log.
func waitSaves(t *testing.T, path string, attempt int, timeout time.Duration) *attemptLog {
	t.Helper()
	var a *attemptLog
	if err := poll(timeout, func() (bool, string) {
		a = readAttempts(t, path)[attempt]
		return a != nil && len(a.saves) == 3, fmt.Sprintf("attempt %d: %+v", attempt, a)
	}); err != nil {
		t.Fatal(err)
	}
	return a
}

func readAttempts(t *testing.T, path string) map[int]*attemptLog {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	out := map[int]*attemptLog{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		attempt, _ := strconv.Atoi(f[1])
		a := out[attempt]
		if a == nil {
			a = &attemptLog{}
			out[attempt] = a
		}
		switch {
		case f[0] == "start" && len(f) == 6:
			a.epoch, _ = strconv.ParseInt(f[2], 10, 64)
			a.holder, a.token, a.checkpoint = f[3], f[4], f[5]
		case f[0] == "saved" && len(f) == 4:
			a.saves = append(a.saves, f[2]+" "+f[3])
		}
	}
	return out
}

// TestCheckpointAfterKill, with leader and with claim dispatch, on real
// daemons: an exec action saves checkpoints through its node; the node is
// killed with kill -9 mid-run; the next attempt, on the other node,
// receives the last checkpoint in SQLEASE_CHECKPOINT and resumes from it.
// The killed attempt's token is refused (401) on the node that runs the
// next one, as is any other token; the current token under another epoch
// is a 409, an invalid body a 400 naming the field. Once the attempt is
// deposed in the database (its job lock taken, as a reclaim does) its
// save answers 409 and changes nothing. The runs API shows each attempt's
// last checkpoint, and the token never appears in a run's output.
func TestCheckpointAfterKill(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl not installed: the action script uses it (bash scripts/test.sh installs it)")
	}
	pg := postgresDB(t)
	for _, c := range []struct {
		backend
		mode string
	}{
		{backend{name: "sqlite", db: sqliteDB}, "leader"}, {backend{name: "sqlite", db: sqliteDB}, "claim"},
		{backend{name: "postgres", db: pg}, "leader"}, {backend{name: "postgres", db: pg}, "claim"},
	} {
		mode := c.mode
		t.Run(c.name+"-"+mode, func(t *testing.T) {
			dir := t.TempDir()
			script, logPath := filepath.Join(dir, "job.sh"), filepath.Join(dir, "attempts.log")
			if err := os.WriteFile(script, []byte(checkpointScript), 0o755); err != nil {
				t.Fatal(err)
			}
			db := c.db(t)
			f := newFleet(t, db, "--dispatch", mode)
			nodes := f.start("a", "b")
			def := fmt.Sprintf(`{"name":"ckpt","schedule":{},"retry":{"max_attempts":3,"backoff":"100ms"},"lock_timeout":"3s",`+
				`"action":{"exec":{"command":["bash",%q,%q],"timeout":"5m"}}}`, script, logPath)
			if resp, body := nodes[0].do(t, "POST", "/v1/jobs", "", []byte(def)); resp.StatusCode != 201 {
				t.Fatalf("create: %d %s", resp.StatusCode, body)
			}

			// Attempt 1 saves 1, 2, 3.
			first := waitSaves(t, logPath, 1, 20*time.Second)
			if first.checkpoint != "none" || strings.Join(first.saves, ",") != "1 204,2 204,3 204" {
				t.Fatalf("attempt 1 got checkpoint %s and saved %v; want none, and three 204s", first.checkpoint, first.saves)
			}
			holder, other := holderOf(nodes, first.holder)
			if holder == nil {
				t.Fatalf("attempt 1 ran on %q, not a node of the fleet", first.holder)
			}

			// kill -9 of its node mid-run: the other node retries the
			// occurrence, from the checkpoint.
			holder.signal(t, syscall.SIGKILL)
			holder.wait(t, 5*time.Second)
			second := waitSaves(t, logPath, 2, 30*time.Second)
			t.Logf("attempt 1 on %s (epoch %d) saved %v; killed; attempt 2 on %s (epoch %d) got %s, saved %v",
				first.holder, first.epoch, first.saves, second.holder, second.epoch, second.checkpoint, second.saves)
			if second.holder != other.holder || second.checkpoint != `{"n":3}` {
				t.Errorf("attempt 2 ran on %s with SQLEASE_CHECKPOINT=%s; want %s with {\"n\":3}", second.holder, second.checkpoint, other.holder)
			}
			if strings.Join(second.saves, ",") != "4 204,5 204,6 204" {
				t.Errorf("attempt 2 saved %v, want 4, 5, 6 (resumed), each 204", second.saves)
			}
			if second.token == first.token {
				t.Error("attempt 2 got attempt 1's run token")
			}

			put := func(token string, epoch int64, body string) (int, string) {
				t.Helper()
				req, err := http.NewRequest("PUT", other.url("/v1/jobs/ckpt/checkpoint"), bytes.NewReader([]byte(body)))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Sqlease-Epoch", strconv.FormatInt(epoch, 10))
				if token != "" {
					req.Header.Set("Authorization", "Bearer "+token)
				}
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				var p struct {
					Detail string `json:"detail"`
				}
				_ = json.NewDecoder(resp.Body).Decode(&p)
				return resp.StatusCode, p.Detail
			}
			for _, c := range []struct {
				what   string
				token  string
				epoch  int64
				body   string
				status int
				detail string
			}{
				{"the killed attempt's token", first.token, first.epoch, `{"n":100}`, 401, ""},
				{"no token", "", second.epoch, `{"n":100}`, 401, ""},
				{"another token", strings.Repeat("0", len(second.token)), second.epoch, `{"n":100}`, 401, ""},
				{"the attempt's token under an epoch not its own", second.token, second.epoch + 1, `{"n":100}`, 409, ""},
				{"an invalid body", second.token, second.epoch, `{"n":`, 400, "checkpoint"},
				{"the current attempt", second.token, second.epoch, `{"n":7}`, 204, ""},
			} {
				status, detail := put(c.token, c.epoch, c.body)
				if status != c.status || !strings.Contains(detail, c.detail) {
					t.Errorf("PUT checkpoint with %s: %d %q, want %d naming %q", c.what, status, detail, c.status, c.detail)
				}
			}

			// The attempt is deposed in the database: its job lock moves on,
			// as when another node reclaims the job.
			var sdb *sql.DB
			var err error
			if path, ok := strings.CutPrefix(db, "sqlite:"); ok {
				sdb, err = sqlite.Open(path)
			} else {
				sdb, err = postgres.Open(db)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer sdb.Close()
			if _, err := sdb.ExecContext(context.Background(), `UPDATE sqlease_jobs SET lock_epoch = lock_epoch + 1 WHERE name = 'ckpt'`); err != nil {
				t.Fatal(err)
			}
			if status, detail := put(second.token, second.epoch, `{"n":8}`); status != 409 {
				t.Errorf("PUT checkpoint of the deposed attempt: %d %q, want 409", status, detail)
			}

			// The ledger: each attempt with its last checkpoint.
			var runs struct {
				Runs []struct {
					Attempt    int             `json:"attempt"`
					Holder     string          `json:"holder"`
					Output     *string         `json:"output"`
					Checkpoint json.RawMessage `json:"checkpoint"`
				} `json:"runs"`
			}
			other.getJSON(t, "/v1/jobs/ckpt/runs", &runs)
			got := map[int]string{}
			for _, r := range runs.Runs {
				got[r.Attempt] = string(r.Checkpoint)
				if r.Output != nil && (strings.Contains(*r.Output, first.token) || strings.Contains(*r.Output, second.token)) {
					t.Errorf("attempt %d's output shows a run token: %s", r.Attempt, *r.Output)
				}
			}
			if got[1] != `{"n":3}` || got[2] != `{"n":7}` {
				t.Errorf("runs list checkpoints %v, want attempt 1 {\"n\":3} and attempt 2 {\"n\":7} (not the deposed save)", got)
			}
		})
	}
}
