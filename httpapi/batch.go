package httpapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
)

// Bounds of one POST /v1/jobs:batch: at most MaxBatchJobs jobs in at most
// MaxBatchBytes of body. A client with more sends several batches; each is
// all or nothing, and a retried one creates only what is missing.
const (
	MaxBatchJobs  = 10_000
	MaxBatchBytes = 32 << 20
)

// BatchResult answers POST /v1/jobs:batch: how many jobs the request
// created and how many existed already with the same content, and each job
// in the order given.
type BatchResult struct {
	Created  int        `json:"created"`
	Existing int        `json:"existing"`
	Jobs     []BatchJob `json:"jobs"`
}

// BatchJob is one job of a BatchResult.
type BatchJob struct {
	Name    string `json:"name"`
	Created bool   `json:"created"`
}

// BatchOut is the answer to a batch that CreateMany stored.
func BatchOut(res []scheduler.Created) BatchResult {
	out := BatchResult{Jobs: make([]BatchJob, len(res))}
	for i, c := range res {
		out.Jobs[i] = BatchJob{Name: c.Job.Name, Created: c.Created}
		if c.Created {
			out.Created++
		} else {
			out.Existing++
		}
	}
	return out
}

// DecodeJobs reads a batch body of at most max jobs: a JSON array of jobs,
// or NDJSON (one job object per line; blank lines are skipped). Each job is
// read as by DecodeJob, and an error names it by its index:
// "jobs[3].schedule: …".
func DecodeJobs(body io.Reader, max int) ([]sqlease.Job, error) {
	raw, err := io.ReadAll(body)
	if err != nil {
		return nil, err // *http.MaxBytesError: 413
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, badRequest("body: must be a JSON array of jobs or NDJSON, got nothing")
	}
	var items []json.RawMessage
	if raw[0] == '[' {
		dec := json.NewDecoder(bytes.NewReader(raw))
		if err := dec.Decode(&items); err != nil {
			return nil, jsonError(err)
		}
		if _, err := dec.Token(); err != io.EOF {
			return nil, badRequest("body: has data after the JSON array")
		}
	} else {
		sc := bufio.NewScanner(bytes.NewReader(raw))
		sc.Buffer(make([]byte, 0, 64<<10), len(raw)+1)
		for sc.Scan() {
			if line := bytes.TrimSpace(sc.Bytes()); len(line) > 0 {
				items = append(items, bytes.Clone(line))
			}
		}
		if err := sc.Err(); err != nil {
			return nil, badRequest("body: %v", err)
		}
	}
	if len(items) == 0 {
		return nil, badRequest("body: no jobs")
	}
	if len(items) > max {
		return nil, badRequest("body: %d jobs, at most %d in one batch", len(items), max)
	}
	jobs := make([]sqlease.Job, len(items))
	var errs []error
	for i, item := range items {
		j, err := DecodeJob(bytes.NewReader(item))
		if err != nil {
			var re *requestError
			if !errors.As(err, &re) {
				return nil, err
			}
			if len(errs) < 20 {
				errs = append(errs, fmt.Errorf("jobs[%d].%s", i, re.detail))
			}
			continue
		}
		jobs[i] = j
	}
	if len(errs) > 0 {
		return nil, badRequest("%s", joinDetails(errs))
	}
	return jobs, nil
}

func joinDetails(errs []error) string {
	parts := make([]string, len(errs))
	for i, e := range errs {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

// createJobs is POST /v1/jobs:batch.
func (a *api) createJobs(w http.ResponseWriter, r *http.Request) {
	jobs, err := DecodeJobs(r.Body, MaxBatchJobs)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	for i, j := range jobs {
		if err := a.checkAction(j); err != nil {
			a.fail(w, r, &requestError{status: statusOf(err), detail: fmt.Sprintf("jobs[%d].%s", i, cleanDetail(err))})
			return
		}
	}
	res, err := a.cfg.Scheduler.CreateMany(r.Context(), jobs)
	switch {
	case errors.Is(err, sqlease.ErrConflict):
		err = &requestError{status: http.StatusConflict, detail: cleanDetail(err)}
	case err != nil && statusOf(err) == http.StatusBadRequest:
		// Every invalid job, on one line.
		err = badRequest("%s", strings.ReplaceAll(cleanDetail(err), "\n", "; "))
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	out := BatchOut(res)
	status := http.StatusOK
	if out.Created > 0 {
		status = http.StatusCreated
	}
	a.writeJSON(w, r, status, out)
}

// checkAction applies the node's rules on actions to a job about to be
// created: the size bound, and the exec policy (Config.Exec), which decides
// for every route that creates something that runs a command.
func (a *api) checkAction(j sqlease.Job) error {
	if len(j.Action) > MaxActionBytes {
		return badRequest("action: %d bytes, at most %d", len(j.Action), MaxActionBytes)
	}
	return a.cfg.Exec.CheckAction(j.Action)
}
