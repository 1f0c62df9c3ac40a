package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/action"
	"github.com/sqlease/sqlease/internal/strictjson"
	"github.com/sqlease/sqlease/scheduler"
	"github.com/sqlease/sqlease/sqlstore"
)

// JobRequest is the body of POST /v1/jobs. Durations are Go duration
// strings ("10m", "1m30s"); schedule.at is an RFC 3339 time. Unknown fields
// are rejected.
type JobRequest struct {
	Name     string          `json:"name"`
	Key      string          `json:"key,omitempty"`
	Schedule ScheduleJSON    `json:"schedule"`
	Action   json.RawMessage `json:"action"`
	// MissedRuns is run_once (default), run_all or skip.
	MissedRuns      string    `json:"missed_runs,omitempty"`
	SkipIfOlderThan string    `json:"skip_if_older_than,omitempty"`
	Retry           RetryJSON `json:"retry,omitzero"`
	LockTimeout     string    `json:"lock_timeout,omitempty"`
	// Paused creates the job paused.
	Paused bool `json:"paused,omitempty"`
	// Overlap is wait (default), allow, skip or cancel_running: what
	// happens to an occurrence that falls due while the previous one runs.
	Overlap string `json:"overlap,omitempty"`
	// MaxConcurrent, only with allow: at most this many occurrences in
	// flight at once across the fleet; absent (0) is no bound.
	MaxConcurrent int `json:"max_concurrent,omitempty"`
	// Breaker, optional: after failures consecutive failed occurrences,
	// the next ones are recorded as skipped until cool_down has passed;
	// then one probe runs.
	Breaker *BreakerJSON `json:"breaker,omitempty"`
}

// BreakerJSON is a job's breaker on the wire. A request sets failures and
// cool_down (default 1m); a job as returned adds its state — closed, open
// or half_open (the cool-down is over: the next occurrence is the probe),
// judged by the database clock — since when, and the consecutive failed
// occurrences counted.
type BreakerJSON struct {
	Failures            int    `json:"failures"`
	CoolDown            string `json:"cool_down,omitempty"`
	State               string `json:"state,omitempty"`
	Since               string `json:"since,omitempty"`
	ConsecutiveFailures *int   `json:"consecutive_failures,omitempty"`
}

// ScheduleJSON is a schedule on the wire: one of every, cron (with an
// optional timezone) and at, or nothing (once, now).
type ScheduleJSON struct {
	Every    string `json:"every,omitempty"`
	Cron     string `json:"cron,omitempty"`
	Timezone string `json:"timezone,omitempty"`
	At       string `json:"at,omitempty"`
}

// RetryJSON is a retry policy on the wire.
type RetryJSON struct {
	MaxAttempts int    `json:"max_attempts,omitempty"`
	Backoff     string `json:"backoff,omitempty"`
}

// Job is a job as the API returns it. Times are RFC 3339 UTC; zero times
// are omitted.
type Job struct {
	Name            string          `json:"name"`
	Key             string          `json:"key,omitempty"`
	Schedule        ScheduleJSON    `json:"schedule"`
	Action          json.RawMessage `json:"action"`
	MissedRuns      string          `json:"missed_runs"`
	SkipIfOlderThan string          `json:"skip_if_older_than,omitempty"`
	Retry           RetryJSON       `json:"retry"`
	LockTimeout     string          `json:"lock_timeout"`
	// Overlap is wait, allow, skip or cancel_running.
	Overlap string `json:"overlap"`
	// MaxConcurrent bounds an allow job's occurrences in flight at once
	// across the fleet (those awaiting a retry included); absent: no bound.
	MaxConcurrent int `json:"max_concurrent,omitempty"`
	// State is "active" or "paused".
	State string `json:"state"`
	// PauseReason is what the pause said, if it said anything.
	PauseReason string `json:"pause_reason,omitempty"`
	// Breaker is the job's breaker and its state; absent when it has none.
	Breaker *BreakerJSON `json:"breaker,omitempty"`
	// NextRunAt is the next occurrence due; omitted when none remains.
	NextRunAt string `json:"next_run_at,omitempty"`
	LastRunAt string `json:"last_run_at,omitempty"`
	// AttemptCount is the number of attempts started for the occurrence at
	// NextRunAt.
	AttemptCount   int    `json:"attempt_count"`
	LockedBy       string `json:"locked_by,omitempty"`
	LockedAt       string `json:"locked_at,omitempty"`
	CreatedAt      string `json:"created_at,omitempty"`
	LastModifiedAt string `json:"last_modified_at,omitempty"`
}

// JobList is the body of GET /v1/jobs. Next, when not empty, is the after
// parameter of the next page.
type JobList struct {
	Jobs []Job  `json:"jobs"`
	Next string `json:"next,omitempty"`
	// Skipped are rows of this page that cannot be decoded (written by
	// hand or by another version): reported, not fatal to the listing.
	Skipped []SkippedJob `json:"skipped,omitempty"`
}

// SkippedJob is a job row a listing could not decode.
type SkippedJob struct {
	Name  string `json:"name"`
	Error string `json:"error"`
}

// Run is one run attempt as the API returns it. FinishedAt is null while
// the run is running; Error is empty unless it failed; Output, the kept
// tail of the action's output, is null when the run kept none.
type Run struct {
	ScheduledFor string  `json:"scheduled_for"`
	Attempt      int     `json:"attempt"`
	Outcome      string  `json:"outcome"`
	Holder       string  `json:"holder"`
	Epoch        int64   `json:"epoch"`
	StartedAt    string  `json:"started_at"`
	FinishedAt   *string `json:"finished_at"`
	Error        string  `json:"error"`
	Output       *string `json:"output"`
	// Checkpoint is the last checkpoint the attempt saved (see
	// checkpointView), null when it saved none.
	Checkpoint     json.RawMessage `json:"checkpoint"`
	IdempotencyKey string          `json:"idempotency_key"`
}

// RunList is the body of GET /v1/jobs/{name}/runs, newest first.
type RunList struct {
	Runs []Run `json:"runs"`
	// Next, when set, is the after= value of the next (older) page.
	Next string `json:"next,omitempty"`
}

// timestamp formats t as RFC 3339 UTC, "" for the zero time.
func timestamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func duration(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

// JobOut converts a stored job to its API form, judging a breaker's
// half_open state by the host clock; the API's handlers use JobOutAt with
// the database clock.
func JobOut(j sqlease.Job) Job { return JobOutAt(j, time.Now()) }

// JobOutAt converts a stored job to its API form, its breaker's state as
// of now (database time).
func JobOutAt(j sqlease.Job, now time.Time) Job {
	out := Job{
		Name: j.Name,
		Key:  j.Key,
		Schedule: ScheduleJSON{
			Every: duration(j.Schedule.Every), Cron: j.Schedule.Cron,
			Timezone: j.Schedule.Timezone, At: timestamp(j.Schedule.At),
		},
		Action:          action.Redact(j.Action),
		MissedRuns:      string(j.MissedRuns),
		SkipIfOlderThan: duration(j.SkipIfOlderThan),
		Retry:           RetryJSON{MaxAttempts: j.Retry.MaxAttempts, Backoff: duration(j.Retry.Backoff)},
		LockTimeout:     j.LockTimeout.String(),
		Overlap:         string(sqlease.OverlapWait),
		State:           "active",
		NextRunAt:       timestamp(j.NextRunAt),
		LastRunAt:       timestamp(j.LastRunAt),
		AttemptCount:    j.Attempt,
		LockedBy:        j.LockedBy,
		CreatedAt:       timestamp(j.CreatedAt),
		LastModifiedAt:  timestamp(j.LastModifiedAt),
	}
	if j.LockedBy != "" {
		out.LockedAt = timestamp(j.LockedAt)
	}
	if j.Schedule.Overlap != "" {
		out.Overlap = string(j.Schedule.Overlap)
	}
	out.MaxConcurrent = j.Schedule.MaxConcurrent
	if j.Paused {
		out.State, out.PauseReason = "paused", j.PauseReason
	}
	if !j.Breaker.IsZero() {
		state, since := j.BreakerState(now)
		n := j.BreakerFailures
		out.Breaker = &BreakerJSON{Failures: j.Breaker.Failures, CoolDown: duration(j.Breaker.CoolDown), State: state,
			Since: timestamp(since), ConsecutiveFailures: &n}
	}
	if len(out.Action) == 0 || !json.Valid(out.Action) {
		out.Action = json.RawMessage("null")
	}
	return out
}

// RunOut converts a run to its API form.
func RunOut(r sqlease.Run) Run {
	out := Run{
		ScheduledFor: timestamp(r.ScheduledFor), Attempt: r.Attempt, Outcome: string(r.Outcome),
		Holder: r.Holder, Epoch: r.Epoch, StartedAt: timestamp(r.StartedAt), Error: r.Error,
		IdempotencyKey: r.IdempotencyKey(),
	}
	if !r.FinishedAt.IsZero() {
		f := timestamp(r.FinishedAt)
		out.FinishedAt = &f
	}
	if r.Output != "" {
		o := r.Output
		out.Output = &o
	}
	out.Checkpoint = checkpointView(r.Checkpoint)
	return out
}

// wireJob mirrors JobRequest with durations and times left raw, so that
// each parse error names its field.
type wireJob struct {
	Name     string `json:"name"`
	Key      string `json:"key"`
	Schedule *struct {
		Every    json.RawMessage `json:"every"`
		Cron     string          `json:"cron"`
		Timezone string          `json:"timezone"`
		At       json.RawMessage `json:"at"`
	} `json:"schedule"`
	Action          json.RawMessage `json:"action"`
	MissedRuns      string          `json:"missed_runs"`
	SkipIfOlderThan json.RawMessage `json:"skip_if_older_than"`
	Retry           *struct {
		MaxAttempts int             `json:"max_attempts"`
		Backoff     json.RawMessage `json:"backoff"`
	} `json:"retry"`
	LockTimeout json.RawMessage `json:"lock_timeout"`
	Paused      bool            `json:"paused"`
	Overlap     string          `json:"overlap"`
	// MaxConcurrent: absent is no bound (0 is refused, not taken as one).
	MaxConcurrent *int `json:"max_concurrent"`
	Breaker       *struct {
		Failures int             `json:"failures"`
		CoolDown json.RawMessage `json:"cool_down"`
	} `json:"breaker"`
}

// DecodeJob reads a job creation body (JobRequest's JSON) into a job,
// without validating what the scheduler validates. Unknown fields, wrong
// JSON types, unparsable durations and times and trailing data are errors
// that name the field and wrap sqlease.ErrInvalidConfig; a body over a
// http.MaxBytesReader limit returns its *http.MaxBytesError.
func DecodeJob(body io.Reader) (sqlease.Job, error) {
	raw, err := io.ReadAll(body)
	if err != nil {
		return sqlease.Job{}, err // *http.MaxBytesError: 413
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return sqlease.Job{}, badRequest("body: must be a JSON job object, got nothing")
	}
	// JSON decoding would turn invalid UTF-8 into U+FFFD silently and
	// \u0000 into a NUL no database column keeps: refuse both.
	if !utf8.Valid(raw) {
		return sqlease.Job{}, badRequest("body: invalid UTF-8")
	}
	if bytes.IndexByte(raw, 0) >= 0 || bytes.Contains(bytes.ToLower(raw), []byte(`\u0000`)) {
		return sqlease.Job{}, badRequest("body: a string contains a NUL character (\\u0000)")
	}
	// Member names exactly as documented, none twice (encoding/json
	// would read "Name" as name and keep the last of two).
	if err := strictjson.Check(raw, &wireJob{}, strictjson.Options{NoNUL: true}); err != nil {
		return sqlease.Job{}, badRequest("%v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var w wireJob
	if err := dec.Decode(&w); err != nil {
		return sqlease.Job{}, jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return sqlease.Job{}, badRequest("body: has data after the JSON object")
	}

	j := sqlease.Job{Name: w.Name, Key: w.Key, MissedRuns: sqlease.MissedRuns(w.MissedRuns), Paused: w.Paused}
	j.Schedule.Overlap = sqlease.Overlap(w.Overlap)
	var errs []error
	if w.MaxConcurrent != nil {
		if *w.MaxConcurrent < 1 {
			errs = append(errs, fmt.Errorf("%w: max_concurrent must be at least 1 (omit it for no bound), got %d", sqlease.ErrInvalidConfig, *w.MaxConcurrent))
		}
		j.Schedule.MaxConcurrent = *w.MaxConcurrent
	}
	dur := func(field string, raw json.RawMessage, d *time.Duration) {
		if err := parseDuration(field, raw, d); err != nil {
			errs = append(errs, err)
		} else if present(raw) && *d <= 0 {
			// Zero would silently mean the default: say so instead.
			errs = append(errs, badRequest("%s: must be positive, got %s (omit it for the default)", field, *d))
		}
	}
	if s := w.Schedule; s != nil {
		j.Schedule.Cron, j.Schedule.Timezone = s.Cron, s.Timezone
		if present(s.Every) {
			dur("schedule.every", s.Every, &j.Schedule.Every)
			if len(errs) == 0 && j.Schedule.Every <= 0 {
				errs = append(errs, badRequest("schedule.every: must be positive, got %s", j.Schedule.Every))
			}
		}
		if present(s.At) {
			var at string
			if len(s.At) > maxScalarBytes {
				errs = append(errs, badRequest("schedule.at: must be an RFC 3339 time of at most %d bytes, got %d", maxScalarBytes, len(s.At)))
			} else if err := json.Unmarshal(s.At, &at); err != nil {
				errs = append(errs, badRequest("schedule.at: must be an RFC 3339 time string, got %s", s.At))
			} else if t, err := time.Parse(time.RFC3339Nano, at); err != nil {
				errs = append(errs, badRequest("schedule.at: must be an RFC 3339 time such as \"2030-01-02T15:04:05Z\", got %q", at))
			} else if t.Year() < 1970 || t.Year() > 9999 {
				// The zero time would otherwise mean "once, now" silently.
				errs = append(errs, badRequest("schedule.at: must be between 1970 and 9999, got %q (omit schedule.at to run once now)", at))
			} else {
				j.Schedule.At = t
			}
		}
	}
	dur("skip_if_older_than", w.SkipIfOlderThan, &j.SkipIfOlderThan)
	if r := w.Retry; r != nil {
		j.Retry.MaxAttempts = r.MaxAttempts
		dur("retry.backoff", r.Backoff, &j.Retry.Backoff)
	}
	dur("lock_timeout", w.LockTimeout, &j.LockTimeout)
	if b := w.Breaker; b != nil {
		if b.Failures <= 0 {
			errs = append(errs, badRequest("breaker.failures: must be a positive integer, got %d", b.Failures))
		}
		j.Breaker.Failures = b.Failures
		dur("breaker.cool_down", b.CoolDown, &j.Breaker.CoolDown)
	}
	if present(w.Action) {
		var compact bytes.Buffer
		if err := json.Compact(&compact, w.Action); err == nil {
			j.Action = compact.Bytes()
		} else {
			j.Action = w.Action
		}
	}
	if len(errs) > 0 {
		return sqlease.Job{}, badRequest("%s", cleanDetail(errors.Join(errs...)))
	}
	return j, nil
}

// jsonError turns a decoding error into a 400 naming the field.
func jsonError(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return err
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return badRequest("%s: must be a JSON %s, got %s", typeErr.Field, jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
	case errors.As(err, &typeErr):
		return badRequest("body: must be a JSON object, got %s", typeErr.Value)
	case errors.As(err, &syntaxErr):
		return badRequest("body: invalid JSON at byte %d: %s", syntaxErr.Offset, strings.TrimPrefix(syntaxErr.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("body: invalid JSON: unexpected end of input")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return badRequest("body: %s", strings.TrimPrefix(err.Error(), "json: "))
	default:
		return badRequest("body: invalid JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
}

func jsonKind(goKind string) string {
	switch goKind {
	case "slice", "array":
		return "array"
	case "map", "struct":
		return "object"
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float32", "float64":
		return "number"
	case "bool":
		return "boolean"
	}
	return goKind
}

func present(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) > 0 && !bytes.Equal(t, []byte("null"))
}

// parseDuration reads a Go duration string; absent or null leaves d zero.
func parseDuration(field string, raw json.RawMessage, d *time.Duration) error {
	if !present(raw) {
		return nil
	}
	if len(raw) > maxScalarBytes {
		return badRequest("%s: must be a Go duration string such as \"1m30s\" of at most %d bytes, got %d", field, maxScalarBytes, len(raw))
	}
	var ad action.Duration
	if err := ad.UnmarshalJSON(bytes.TrimSpace(raw)); err != nil {
		return badRequest("%s: %v", field, err)
	}
	*d = time.Duration(ad)
	return nil
}

// MaxActionBytes bounds a stored action (its compact JSON):
// scheduler.MaxActionBytes, which Prepare enforces.
const MaxActionBytes = scheduler.MaxActionBytes

// maxScalarBytes bounds a duration or time string of a job body before it
// is parsed or quoted back in an error ("8760h", an RFC 3339 time with
// nanoseconds and an offset: under 40 bytes).
const maxScalarBytes = 64

// createJob is POST /v1/jobs.
func (a *api) createJob(w http.ResponseWriter, r *http.Request) {
	j, err := DecodeJob(r.Body)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if hk := r.Header.Get("Idempotency-Key"); hk != "" {
		switch {
		case j.Key == "":
			j.Key = hk
		case j.Key != hk:
			a.fail(w, r, badRequest("key: %q differs from the Idempotency-Key header %q", j.Key, hk))
			return
		}
	}
	if err := a.checkAction(j); err != nil {
		a.fail(w, r, err)
		return
	}
	// Validate everything, the action included, before writing anything.
	if _, _, err := scheduler.Prepare(j, action.ValidateJSON); err != nil {
		a.fail(w, r, err)
		return
	}
	stored, created, err := a.cfg.Scheduler.Create(r.Context(), j)
	// ErrNoJob out of a create: the name (or key) was taken, and the row
	// that held it was deleted before it could be compared. The name is
	// free again, so try again, a few times: a create racing a delete of
	// the same name once answered 404 `no job named ""` (issue 30, item 26).
	for try := 0; try < 3 && errors.Is(err, sqlease.ErrNoJob); try++ {
		stored, created, err = a.cfg.Scheduler.Create(r.Context(), j)
	}
	if errors.Is(err, sqlease.ErrNoJob) {
		err = &requestError{status: http.StatusConflict,
			detail: fmt.Sprintf("name: job %q is being created and deleted concurrently; retry", j.Name)}
	}
	if errors.Is(err, sqlease.ErrConflict) {
		err = a.conflict(r.Context(), j, err)
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/jobs/"+url.PathEscape(stored.Name))
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	a.writeJSON(w, r, status, a.jobOut(r.Context(), stored))
}

// jobOut is JobOutAt as of the database clock, read only for a job with a
// breaker (the host clock should the read fail: the state is shown, not
// acted on).
func (a *api) jobOut(ctx context.Context, j sqlease.Job) Job {
	if j.Breaker.IsZero() {
		return JobOut(j)
	}
	now, err := a.cfg.Scheduler.Now(ctx)
	if err != nil {
		now = time.Now()
	}
	return JobOutAt(j, now)
}

// conflict names the field of a creation clash: the name if a job has it,
// else the key.
func (a *api) conflict(ctx context.Context, j sqlease.Job, err error) error {
	field := "key"
	if _, gerr := a.cfg.Scheduler.Job(ctx, j.Name); gerr == nil || j.Key == "" {
		field = "name"
	}
	return &requestError{status: http.StatusConflict, detail: field + ": " + cleanDetail(err)}
}

// listPage starts a listing's page: its limit and its cursor (after) as
// the query gives them; a bad limit is answered here (ok false).
func (a *api) listPage(w http.ResponseWriter, r *http.Request) (p *page, after string, ok bool) {
	q := r.URL.Query()
	limit, err := listLimit(q)
	if err != nil {
		a.fail(w, r, err)
		return nil, "", false
	}
	return newPage(limit), q.Get("after"), true
}

// listLimit reads the limit query parameter.
func listLimit(q url.Values) (int, error) {
	s := q.Get("limit")
	if s == "" {
		return DefaultListLimit, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > MaxListLimit {
		return 0, badRequest("limit: must be an integer between 1 and %d, got %q", MaxListLimit, s)
	}
	return n, nil
}

// listJobs is GET /v1/jobs: by name, limit rows or MaxPageBytes.
func (a *api) listJobs(w http.ResponseWriter, r *http.Request) {
	p, read, ok := a.listPage(w, r)
	if !ok {
		return
	}
	// A row is a job or a row that cannot be decoded, in name order.
	type row struct {
		job *sqlease.Job
		bad *sqlstore.CorruptRow
	}
	out := JobList{Jobs: []Job{}}
	var now time.Time // the database clock, read for the first job with a breaker
	more, err := fill(p, func(n int) ([]row, error) {
		jobs, skipped, last, err := a.cfg.Scheduler.JobsChecked(r.Context(), read, n)
		rows := make([]row, 0, len(jobs)+len(skipped))
		for len(jobs) > 0 || len(skipped) > 0 {
			if len(skipped) == 0 || len(jobs) > 0 && jobs[0].Name < skipped[0].Name {
				rows, jobs = append(rows, row{job: &jobs[0]}), jobs[1:]
			} else {
				rows, skipped = append(rows, row{bad: &skipped[0]}), skipped[1:]
			}
		}
		read = last
		return rows, err
	}, func(rw row) bool {
		if rw.bad != nil {
			sk := SkippedJob{Name: rw.bad.Name, Error: rw.bad.Err.Error()}
			if !p.fit(sk) {
				return false
			}
			a.log.Warn("job_row_corrupt", slog.String("job", sk.Name), slog.String("error", sk.Error))
			out.Skipped, out.Next = append(out.Skipped, sk), sk.Name
			return true
		}
		if !rw.job.Breaker.IsZero() && now.IsZero() {
			var err error
			if now, err = a.cfg.Scheduler.Now(r.Context()); err != nil {
				now = time.Now()
			}
		}
		jo := JobOutAt(*rw.job, now)
		if !p.fit(jo) {
			return false
		}
		out.Jobs, out.Next = append(out.Jobs, jo), jo.Name
		return true
	})
	a.writePage(w, r, &out, &out.Next, more, err, a.fail)
}

// ParseRunCursor reads a runs page's next value: "<RFC 3339 time>/<attempt>"
// (the dashboard pages runs the same way).
func ParseRunCursor(s string) (time.Time, int, bool) {
	i := strings.LastIndexByte(s, '/')
	if i < 0 {
		return time.Time{}, 0, false
	}
	t, err := time.Parse(time.RFC3339Nano, s[:i])
	n, err2 := strconv.Atoi(s[i+1:])
	return t, n, err == nil && err2 == nil && n >= 0
}

// getJob is GET /v1/jobs/{name}.
func (a *api) getJob(w http.ResponseWriter, r *http.Request) {
	j, err := a.cfg.Scheduler.Job(r.Context(), r.PathValue("name"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.writeJSON(w, r, http.StatusOK, a.jobOut(r.Context(), j))
}

// deleteJob is DELETE /v1/jobs/{name}.
func (a *api) deleteJob(w http.ResponseWriter, r *http.Request) {
	if err := a.cfg.Scheduler.Delete(r.Context(), r.PathValue("name")); err != nil {
		a.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// jobChange is POST /v1/jobs/{name}/resume and trigger.
func (a *api) jobChange(change func(ctx context.Context, name string) (sqlease.Job, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		j, err := change(r.Context(), r.PathValue("name"))
		if err != nil {
			a.fail(w, r, err)
			return
		}
		a.writeJSON(w, r, http.StatusOK, a.jobOut(r.Context(), j))
	}
}

// PauseRequest is the optional body of POST /v1/jobs/{name}/pause.
type PauseRequest struct {
	// Reason is stored with the job until it is resumed (at most
	// scheduler.MaxPauseReasonBytes).
	Reason string `json:"reason,omitempty"`
}

// PrefixRequest is the body of POST /v1/jobs:pause and /v1/jobs:resume:
// every job whose name starts with Prefix. Prefix is required — "" (every
// job) must be said — and Reason is for a pause only.
type PrefixRequest struct {
	Prefix *string `json:"prefix"`
	Reason string  `json:"reason,omitempty"`
}

// PrefixResult answers POST /v1/jobs:pause (Paused) and /v1/jobs:resume
// (Resumed): how many jobs the prefix matched, each now in that state.
type PrefixResult struct {
	Paused  *int64 `json:"paused,omitempty"`
	Resumed *int64 `json:"resumed,omitempty"`
}

// decodeSmall reads a small JSON object body into v, strictly (unknown or
// repeated members, trailing data and NULs are 400s naming the field); an
// empty body leaves v as it is and reports false.
func decodeSmall(r *http.Request, v any) (bool, error) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return false, err // *http.MaxBytesError: 413
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return false, nil
	}
	if !utf8.Valid(raw) {
		return false, badRequest("body: invalid UTF-8")
	}
	if err := strictjson.Check(raw, v, strictjson.Options{NoNUL: true}); err != nil {
		return false, badRequest("%v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return false, jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return false, badRequest("body: has data after the JSON object")
	}
	return true, nil
}

// pauseJob is POST /v1/jobs/{name}/pause, with an optional reason.
func (a *api) pauseJob(w http.ResponseWriter, r *http.Request) {
	var req PauseRequest
	if _, err := decodeSmall(r, &req); err != nil {
		a.fail(w, r, err)
		return
	}
	if len(req.Reason) > scheduler.MaxPauseReasonBytes {
		a.fail(w, r, badRequest("reason: must be at most %d bytes, got %d", scheduler.MaxPauseReasonBytes, len(req.Reason)))
		return
	}
	j, err := a.cfg.Scheduler.PauseWithReason(r.Context(), r.PathValue("name"), req.Reason)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	a.writeJSON(w, r, http.StatusOK, a.jobOut(r.Context(), j))
}

// pausePrefix is POST /v1/jobs:pause (pause) and /v1/jobs:resume: every
// job whose name starts with the prefix, in one statement.
func (a *api) pausePrefix(pause bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req PrefixRequest
		if _, err := decodeSmall(r, &req); err != nil {
			a.fail(w, r, err)
			return
		}
		switch {
		case req.Prefix == nil:
			a.fail(w, r, badRequest(`prefix: required ("" for every job, said explicitly)`))
			return
		case !pause && req.Reason != "":
			a.fail(w, r, badRequest("reason: only a pause takes a reason"))
			return
		case len(req.Reason) > scheduler.MaxPauseReasonBytes:
			a.fail(w, r, badRequest("reason: must be at most %d bytes, got %d", scheduler.MaxPauseReasonBytes, len(req.Reason)))
			return
		}
		if err := scheduler.ValidatePrefix(*req.Prefix); err != nil {
			a.fail(w, r, badRequest("prefix: %s", cleanDetail(err)))
			return
		}
		var n int64
		var err error
		var out PrefixResult
		if pause {
			n, err = a.cfg.Scheduler.PausePrefix(r.Context(), *req.Prefix, req.Reason)
			out.Paused = &n
		} else {
			n, err = a.cfg.Scheduler.ResumePrefix(r.Context(), *req.Prefix)
			out.Resumed = &n
		}
		if err != nil {
			a.fail(w, r, err)
			return
		}
		a.writeJSON(w, r, http.StatusOK, out)
	}
}

// listRuns is GET /v1/jobs/{name}/runs: the runs of the job that has the
// name now (404 if none does), newest first, limit rows or MaxPageBytes.
// Runs are read a few at a time (page.want), so a page of runs with large
// outputs does not read a thousand of them to send a handful.
func (a *api) listRuns(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	p, after, ok := a.listPage(w, r)
	if !ok {
		return
	}
	var at time.Time
	attempt := -1 // no cursor: the newest runs
	if after != "" {
		// The cursor is the last run of the previous page: its occurrence
		// and attempt.
		var ok bool
		if at, attempt, ok = ParseRunCursor(after); !ok {
			a.fail(w, r, badRequest("after: must be the next value of a previous page (RFC 3339 time/attempt), got %q", after))
			return
		}
	}
	out := RunList{Runs: []Run{}}
	more, err := fill(p, func(n int) ([]sqlease.Run, error) {
		var runs []sqlease.Run
		var err error
		if attempt < 0 {
			runs, err = a.cfg.Scheduler.Runs(r.Context(), name, n)
		} else {
			runs, err = a.cfg.Scheduler.RunsBefore(r.Context(), name, at, attempt, n)
		}
		if len(runs) > 0 {
			at, attempt = runs[len(runs)-1].ScheduledFor, runs[len(runs)-1].Attempt
		}
		return runs, err
	}, func(run sqlease.Run) bool {
		ro := RunOut(run)
		if !p.fit(ro) {
			return false
		}
		out.Runs = append(out.Runs, ro)
		out.Next = run.ScheduledFor.UTC().Format(time.RFC3339Nano) + "/" + strconv.Itoa(run.Attempt)
		return true
	})
	if err == nil && len(out.Runs) == 0 {
		_, err = a.cfg.Scheduler.Job(r.Context(), name) // an empty list of a job that is not there is 404
	}
	a.writePage(w, r, &out, &out.Next, more, err, a.fail)
}
