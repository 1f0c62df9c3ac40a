package cli

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/sqlite"
)

// A process call's secret is checked before its epoch (issue 30, item 17):
// without the run's secret every call is ErrUnauthorized — whether the
// singleton runs here, under which epoch, or not at all — and only the
// run's own secret learns that its epoch is stale (ErrConflict).
func TestProcessCallSecretFirst(t *testing.T) {
	h := &singletonHost{}
	right, release := h.runs.issue("svc", &procRun{epoch: 7})
	defer release()
	for _, tc := range []struct {
		name   string
		epoch  int64
		secret string
		want   error
	}{
		{"svc", 7, "wrong", httpapi.ErrUnauthorized},
		{"svc", 6, "wrong", httpapi.ErrUnauthorized},
		{"absent", 7, "wrong", httpapi.ErrUnauthorized},
		{"absent", 7, "", httpapi.ErrUnauthorized},
		{"svc", 6, right, sqlease.ErrConflict},
	} {
		if _, err := h.current(tc.name, tc.epoch, tc.secret); !errors.Is(err, tc.want) {
			t.Errorf("%+v: %v", tc, err)
		}
		if err := h.Heartbeat(context.Background(), tc.name, tc.epoch, tc.secret); !errors.Is(err, tc.want) {
			t.Errorf("heartbeat %+v: %v", tc, err)
		}
	}
	if r, err := h.current("svc", 7, right); err != nil || r.epoch != 7 {
		t.Fatalf("the run's own call: %v", err)
	}
	// A run that ended is gone with its secret; a later run of the name
	// has a secret of its own.
	release()
	if _, err := h.current("svc", 7, right); !errors.Is(err, httpapi.ErrUnauthorized) {
		t.Fatalf("an ended run's secret: %v", err)
	}
	next, release2 := h.runs.issue("svc", &procRun{epoch: 8})
	defer release2()
	if next == right {
		t.Fatal("two runs got the same secret")
	}
	if _, err := h.current("svc", 8, right); !errors.Is(err, httpapi.ErrUnauthorized) {
		t.Fatalf("the earlier run's secret for the later run: %v", err)
	}
}

// FuzzSingletonCreate feeds POST /v1/singletons bodies to the real
// definition path (singletonAdmin.Create on SQLite): never a panic, never a
// server error for bad input. The seeds run in every go test.
func FuzzSingletonCreate(f *testing.F) {
	for _, seed := range []string{
		`{"name":"ingest","command":["python3","/srv/ingest.py"],"env":{"A":"b"},"initial_state":{"cursor":0},"heartbeat":"30s","stop_timeout":"10s"}`,
		`{"name":"ingest","command":["sleep","1"]}`,
		`{"name":"Bad Name","command":["x"]}`,
		`{"name":"x","command":[]}`,
		`{"name":"x","command":["a\u0000b"]}`,
		"{\"name\":\"x\",\"command\":[\"\xff\"]}",
		`{"name":"x","command":["a"],"heartbeat":"-1s"}`,
		`{"name":"x","command":["a"],"heartbeat":"99999999h"}`,
		`{"name":"x","command":["a"],"initial_state":` + strings.Repeat("[", 10000) + `}`,
		`{"name":"x","command":["a"],"env":{"":"x","A=B":"c"}}`,
		`{"name":"x","command":["a"],"unknown":1}`,
		`{"name":"x","command":["a"]} trailing`,
		`[]`, `null`, ``, `"x"`, `{`,
		`{"name":"x","command":["a"],"env":{"X":"` + strings.Repeat("x", httpapi.MaxSingletonBytes) + `"}}`,
	} {
		f.Add([]byte(seed))
	}
	st, err := sqlite.OpenStore(context.Background(), filepath.Join(f.TempDir(), "fuzz.db"), "sqlease")
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.DB().Close() })
	a := singletonAdmin{store: st, leases: st}
	f.Fuzz(func(t *testing.T, body []byte) {
		s, _, err := a.Create(context.Background(), body)
		if err != nil {
			if code := httpapi.StatusOf(err); code >= http.StatusInternalServerError {
				t.Fatalf("body %.200q: status %d: %v", body, code, err)
			}
			return
		}
		if s.Name == "" || len(s.Command) == 0 {
			t.Fatalf("body %.200q: created %+v", body, s)
		}
		if err := a.Delete(context.Background(), s.Name); err != nil {
			t.Fatal(err)
		}
	})
}
