package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/scheduler"
)

// bulkWay is one way of creating n jobs that the bulk scenario times.
type bulkWay struct {
	name string
	run  func(ctx context.Context, s *scheduler.Scheduler, url string, jobs []sqlease.Job) error
}

// bulkWays: one Create per job from 32 goroutines (the baseline a client
// without a bulk call has), CreateMany in batches from 1 and from 4
// callers, and POST /v1/jobs:batch in batches from 4 clients over real
// HTTP.
func bulkWays(batch int) []bulkWay {
	return []bulkWay{
		{"Create ×32 goroutines", func(ctx context.Context, s *scheduler.Scheduler, _ string, jobs []sqlease.Job) error {
			return parallel(32, len(jobs), 1, func(lo, _ int) error {
				_, created, err := s.Create(ctx, jobs[lo])
				if err == nil && !created {
					err = fmt.Errorf("job %s not created", jobs[lo].Name)
				}
				return err
			})
		}},
		createMany(1, batch),
		createMany(4, batch),
		{fmt.Sprintf("POST /v1/jobs:batch ×4 clients, batches of %d", batch), func(ctx context.Context, _ *scheduler.Scheduler, url string, jobs []sqlease.Job) error {
			return parallel(4, len(jobs), batch, func(lo, hi int) error {
				var body bytes.Buffer
				for _, j := range jobs[lo:hi] {
					fmt.Fprintf(&body, `{"name":%q,"schedule":{"at":%q},"action":{"http":{"url":"http://127.0.0.1:9/x"}}}`+"\n",
						j.Name, j.Schedule.At.Format(time.RFC3339Nano))
				}
				req, err := http.NewRequestWithContext(ctx, "POST", url+"/v1/jobs:batch", &body)
				if err != nil {
					return err
				}
				req.Header.Set("Content-Type", "application/x-ndjson")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusCreated {
					return fmt.Errorf("POST /v1/jobs:batch: %s: %.200s", resp.Status, b)
				}
				var out httpapi.BatchResult
				if err := json.Unmarshal(b, &out); err != nil || out.Created != hi-lo {
					return fmt.Errorf("POST /v1/jobs:batch: created %d of %d (%v)", out.Created, hi-lo, err)
				}
				return nil
			})
		}},
	}
}

func createMany(callers, batch int) bulkWay {
	return bulkWay{fmt.Sprintf("CreateMany ×%d callers, batches of %d", callers, batch), func(ctx context.Context, s *scheduler.Scheduler, _ string, jobs []sqlease.Job) error {
		return parallel(callers, len(jobs), batch, func(lo, hi int) error {
			res, err := s.CreateMany(ctx, jobs[lo:hi])
			if err == nil && len(res) > 0 && !res[0].Created {
				err = fmt.Errorf("job %s not created", res[0].Job.Name)
			}
			return err
		})
	}}
}

// parallel calls fn on [lo, hi) chunks of n items of size chunk from
// workers goroutines; the first error stops it.
func parallel(workers, n, chunk int, fn func(lo, hi int) error) error {
	var next atomic.Int64
	var first error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				lo := int(next.Add(int64(chunk))) - chunk
				if lo >= n {
					return
				}
				if err := fn(lo, min(lo+chunk, n)); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					next.Store(int64(n))
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// bulkScenario creates n one-off jobs ("at" an hour ahead, HTTP actions)
// each way, on a fresh database each time, interleaved over runs, and
// prints the jobs/s of each and their ratio to the first (one Create per
// job), medians over runs. Every job is counted in the table afterwards.
func bulkScenario(ctx context.Context, e *env, dialect string, n, batch, runs int) bool {
	ways := bulkWays(batch)
	fmt.Printf("\n== bulk create — %s, %d one-off jobs per run, each way on a fresh database, interleaved\n", dialect, n)
	rates := make([][]float64, len(ways))
	for r := 1; r <= runs; r++ {
		for w, way := range ways {
			if ctx.Err() != nil {
				return false
			}
			rate, err := runBulk(ctx, e, dialect, n, way)
			if err != nil {
				fmt.Printf("  run %d, %s: ERROR %v\n", r, way.name, err)
				exitCode = 1
				continue
			}
			rates[w] = append(rates[w], rate)
			fmt.Printf("  run %d: %-48s %8.0f jobs/s\n", r, way.name, rate)
		}
	}
	fmt.Printf("  medians of %d runs:\n", runs)
	base := medianOf(rates[0])
	for w, way := range ways {
		ratio := ""
		if base > 0 {
			ratio = fmt.Sprintf("  (%.1f × %s)", medianOf(rates[w])/base, ways[0].name)
		}
		fmt.Printf("    %-48s %8.0f jobs/s%s\n", way.name, medianOf(rates[w]), ratio)
	}
	return true
}

func runBulk(ctx context.Context, e *env, dialect string, n int, way bulkWay) (float64, error) {
	_, st, done, err := e.migrated(ctx, dialect)
	if err != nil {
		return 0, err
	}
	defer done()
	s, err := scheduler.New(scheduler.Config{Store: st})
	if err != nil {
		return 0, err
	}
	el, err := election.New(election.Config{Store: st, HolderID: "bench"})
	if err != nil {
		return 0, err
	}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{Scheduler: s, Elector: el, ListenAddr: "127.0.0.1:0"}))
	defer srv.Close()
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	jobs := make([]sqlease.Job, n)
	for i := range jobs {
		jobs[i] = sqlease.Job{Name: fmt.Sprintf("bulk-%07d", i), Schedule: sqlease.Schedule{At: at},
			Action: json.RawMessage(`{"http":{"url":"http://127.0.0.1:9/x"}}`)}
	}
	start := time.Now()
	if err := way.run(ctx, s, srv.URL, jobs); err != nil {
		return 0, err
	}
	rate := float64(n) / time.Since(start).Seconds()
	var count int
	if err := st.DB().QueryRowContext(ctx, "SELECT count(*) FROM "+prefix+"_jobs").Scan(&count); err != nil {
		return 0, err
	}
	if count != n {
		return 0, fmt.Errorf("%d jobs in the table, want %d", count, n)
	}
	return rate, nil
}

// medianOf is the median of v (the mean of the middle two of an even
// count), 0 for none.
func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if n := len(s); n%2 == 0 {
		// An even count's median is the mean of the middle two: the upper
		// one alone leans every even-round figure up.
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
