package httpapi_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
)

// A create racing a delete of the same name (issue 30, item 26): the
// insert finds the name taken, the row it then reads to compare contents
// is gone, and Create returns ErrNoJob — which POST /v1/jobs answered as
// 404 `no job named ""` (the route has no {name}). Now such a create is
// tried again, and what it answers names the job of the body.
func TestCreateRacingDelete(t *testing.T) {
	n := newNode(t, dbPath(t), nodeOpts{noElector: true})
	ctx, cancel := context.WithCancel(context.Background())
	other := sqlease.Job{Name: "x", Schedule: sqlease.Schedule{Every: time.Hour}, Action: []byte(`{"http":{"url":"http://127.0.0.1:8/"}}`)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // another client creates and deletes x, with other content
		defer wg.Done()
		for ctx.Err() == nil {
			_, _, _ = n.sched.Create(ctx, other)
			_ = n.sched.Delete(ctx, "x")
		}
	}()
	defer func() { cancel(); wg.Wait() }()
	body := `{"name":"x","schedule":{"every":"1h"},"action":{"http":{"url":"http://127.0.0.1:9/"}}}`
	statuses := map[int]int{}
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		res := n.do("POST", "/v1/jobs", body)
		statuses[res.status]++
		switch res.status {
		case 200, 201:
		case 409:
			if p := res.problem(t, 409); !strings.Contains(p.Detail, `"x"`) {
				t.Fatalf("409 does not name the job: %s", p.Detail)
			}
		default:
			t.Fatalf("create racing a delete: %d %s (so far %v)", res.status, res.body, statuses)
		}
		if res.status == 201 {
			_ = n.sched.Delete(ctx, "x") // or the other client did

		}
	}
	t.Logf("answers: %v", statuses)
}
