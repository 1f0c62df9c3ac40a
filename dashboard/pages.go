package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/internal/netguard"
	"github.com/sqlease/sqlease/sqlstore"
)

// Page sizes and bounds.
const (
	historyPage  = 50
	overviewHist = 8
	jobsPage     = 50
	runsPage     = 50
	// maxScan bounds the job rows one filtered page reads; a page that
	// found fewer matches continues where the scan stopped.
	maxScan = 1000
	// seenWithin is how long after its lease expired a node still counts
	// as seen recently.
	seenWithin = 10 * time.Minute
)

// The lease name prefixes of the roles a node can hold.
const (
	workerPrefix    = sqlstore.WorkerLeasePrefix
	memberPrefix    = "member:"
	singletonPrefix = "singleton:"
	nodePrefix      = sqlstore.NodeLeasePrefix
)

var funcs = template.FuncMap{
	"stamp": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000Z")
	},
	"iso": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339Nano)
	},
	"ago":          ago,
	"dur":          human,
	"path":         url.PathEscape,
	"size":         size,
	"add":          func(a, b int) int { return a + b },
	"outcomeNames": func() []sqlease.Outcome { return outcomes },
}

// human writes a duration for people: 1.8 s, 4 min 12 s, 3 h 5 min.
func human(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	switch {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + " ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s"
	case d < time.Hour:
		return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%d h %d min", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%d days", int(d.Hours()/24))
}

// ago says how far t is from now, both in database time.
func ago(t, now time.Time) string {
	if t.IsZero() || now.IsZero() {
		return ""
	}
	if t.After(now) {
		return "in " + human(t.Sub(now))
	}
	return human(now.Sub(t)) + " ago"
}

// leaderView is the leader lease as the overview shows it.
type leaderView struct {
	Found    bool
	Lease    sqlease.Lease
	Live     bool
	Left     time.Duration
	Progress int // percent of the lease duration left
}

type overviewData struct {
	Now        time.Time
	LeaseName  string
	Leader     leaderView
	Nodes      []nodeRow
	History    []sqlstore.LeaseEvent
	Singletons []singletonRow
	Others     []sqlease.Lease
	// Durability is how durable this node's writes are (Config.Durability;
	// zero Mode when not known).
	Durability sqlease.Durability
	// FailingJobs: of the first JobsChecked jobs by name (JobsUnchecked:
	// there are more), those whose newest finished runs failed;
	// FailingSingletons: failing, stale or unplaced.
	FailingJobs       []jobRow
	FailingSingletons []singletonRow
	JobsChecked       int
	JobsUnchecked     bool
	// Unreachable and NotReady count the nodes in those states.
	Unreachable, NotReady int
	// The rows left out at the page's byte budget.
	MoreNodes, MoreSingletons, MoreOthers  int
	MoreFailingJobs, MoreFailingSingletons int

	// Timeline: who led over the last hour (SVG); RunsPerNode: runs
	// executed per node in the last hour, among the runs read (SVG).
	Timeline, RunsPerNode template.HTML

	allSingletons []httpapi.Singleton
	recent        []sqlease.Run
}

// singletonRow is a singleton as a page shows it: its state cut to
// stateShown bytes (StateSize is the whole), its definition (command,
// env) only on the singletons page.
type singletonRow struct {
	httpapi.Singleton
	HeartbeatAge string
	StateText    string
	StateSize    int
	StateCut     bool
}

// singletonRowOf makes the row of s; full keeps its command and env.
func singletonRowOf(s httpapi.Singleton, now time.Time, full bool) singletonRow {
	row := singletonRow{Singleton: s, StateSize: len(s.State)}
	row.StateText = cutHead(string(s.State), stateShown)
	row.StateCut = len(row.StateText) < len(s.State)
	row.State = nil
	if !full {
		row.Command, row.Env = nil, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s.HeartbeatAt); err == nil {
		row.HeartbeatAge = human(now.Sub(t))
	}
	return row
}

// cost is what the row renders, in bytes.
func (r singletonRow) cost() int {
	n := rowMarkup + escapedAll(r.Name, r.Status, r.Holder, r.HeartbeatAge, r.StateText, r.Heartbeat, r.StopTimeout,
		r.StateSavedAt, r.StartedAt, r.HeartbeatAt, r.LastError, r.LastErrorAt) + 2*escaped(r.Name)
	for _, c := range r.Command {
		n += escaped(c) + 8
	}
	for k, v := range r.Env {
		n += escapedAll(k, v.String()) + 16
	}
	return n
}

func (d *Dashboard) overview(r *http.Request, v *view) (string, error) {
	ctx := r.Context()
	name := d.cfg.Elector.LeaseName()
	leases, err := d.cfg.Store.Leases(ctx)
	if err != nil {
		return "", err
	}
	data := overviewData{LeaseName: name}
	if d.cfg.Durability != nil {
		data.Durability = d.cfg.Durability()
	}
	for _, l := range leases {
		if data.Now.IsZero() {
			data.Now = l.ObservedAt
		}
		switch {
		case l.Name == name:
			data.Leader = leaderView{Found: true, Lease: l, Live: !l.Expired(), Left: l.ExpiresAt.Sub(l.ObservedAt)}
			if total := l.ExpiresAt.Sub(l.RenewedAt); total > 0 && data.Leader.Live {
				data.Leader.Progress = int(100 * data.Leader.Left / total)
			}
		case strings.HasPrefix(l.Name, workerPrefix), strings.HasPrefix(l.Name, memberPrefix),
			strings.HasPrefix(l.Name, singletonPrefix), strings.HasPrefix(l.Name, nodePrefix):
		default:
			data.Others = append(data.Others, l)
		}
	}
	if data.Now.IsZero() {
		if data.Now, err = d.cfg.Store.Now(ctx); err != nil {
			return "", err
		}
	}
	if data.History, err = d.cfg.Store.LeaseHistory(ctx, name, 0, overviewHist); err != nil {
		return "", err
	}
	data.Nodes = d.nodes(ctx, leases, data.History, data.Now)
	b := &budget{left: d.cfg.PageBudget}
	b.take(4 * rowMarkup) // the leader's card
	if data.Timeline, err = d.timeline(ctx, "timeline-hour", name, data.Leader.Lease, data.Leader.Found, time.Hour, data.Now); err != nil {
		return "", err
	}
	if !b.take(len(data.Timeline)) {
		data.Timeline = ""
	}
	data.History = eventsWithin(b, data.History)
	// Within the budget: what is failing, the nodes, then the singletons
	// (the rest on their own pages), then the other leases.
	if err := d.failing(ctx, b, &data, r.URL.Query().Get("fragment") == "1"); err != nil {
		return "", err
	}
	for i, n := range data.Nodes {
		c := rowMarkup + escapedAll(n.Holder, n.Why, n.Version, n.Durability) + escapedAll(n.Roles...) + 2*len(n.Roles)
		if !b.take(c) {
			data.MoreNodes = len(data.Nodes) - i
			data.Nodes = data.Nodes[:i]
			break
		}
	}
	if len(data.recent) > 0 {
		labels, counts := perHolder(data.recent)
		data.RunsPerNode = barsSVG("runs-per-node", "Runs executed per node in the last hour",
			fmt.Sprintf("Among the newest %d runs of each of the first %d jobs, those started in the last hour: %s.", recentRuns, data.JobsChecked, countsText(labels, counts)),
			labels, counts)
		if !b.take(len(data.RunsPerNode)) {
			data.RunsPerNode = ""
		}
	}
	for _, n := range data.Nodes {
		switch n.State {
		case nodeUnreachable:
			data.Unreachable++
		case nodeNotReady:
			data.NotReady++
		}
	}
	for i, s := range data.allSingletons {
		row := singletonRowOf(s, data.Now, false)
		if !b.take(row.cost()) {
			data.MoreSingletons = len(data.allSingletons) - i
			break
		}
		data.Singletons = append(data.Singletons, row)
	}
	data.allSingletons = nil
	for i, l := range data.Others {
		if !b.take(rowMarkup + escapedAll(l.Name, l.Holder)) {
			data.MoreOthers = len(data.Others) - i
			data.Others = data.Others[:i]
			break
		}
	}
	v.Title, v.Nav, v.Data = "Overview", "overview", data
	return "overview", nil
}

// overviewJobScan bounds the jobs the overview looks at for failures (by
// name, each one index range of its newest runs); the jobs page's
// "failing" filter goes through all of them.
const overviewJobScan = 200

// failScan is the overview's scan of the jobs for failures: a statement
// per job (up to overviewJobScan), so the live refresh of every open
// overview reuses one for failScanFor; a page loaded by a person scans
// afresh.
type failScan struct {
	mu        sync.Mutex
	at        time.Time // local clock
	failing   []jobRow
	recent    []sqlease.Run
	checked   int
	unchecked bool
}

const failScanFor = 5 * time.Second

// scanFailing returns the failing jobs among the first overviewJobScan,
// the runs read started in the last hour, how many jobs it checked and
// whether there are more.
func (d *Dashboard) scanFailing(ctx context.Context, now time.Time, reuse bool) (failing []jobRow, recent []sqlease.Run, checked int, unchecked bool, err error) {
	f := &d.scan
	f.mu.Lock()
	defer f.mu.Unlock()
	if reuse && !f.at.IsZero() && time.Since(f.at) < failScanFor {
		return f.failing, f.recent, f.checked, f.unchecked, nil
	}
	js, _, _, err := d.cfg.Scheduler.JobsChecked(ctx, "", overviewJobScan+1)
	if err != nil {
		return nil, nil, 0, false, err
	}
	if len(js) > overviewJobScan {
		js, unchecked = js[:overviewJobScan], true
	}
	for _, j := range js {
		row, ok := d.jobRow(ctx, j, "failing", now)
		for _, r := range row.recent {
			if now.Sub(r.StartedAt) < time.Hour {
				recent = append(recent, r)
			}
		}
		row.recent = nil
		if ok {
			failing = append(failing, row)
		}
	}
	f.at, f.failing, f.recent, f.checked, f.unchecked = time.Now(), failing, recent, len(js), unchecked
	return failing, recent, len(js), unchecked, nil
}

// failing fills the overview's failing jobs and singletons; reuse: a live
// refresh, which may reuse a recent scan of the jobs.
func (d *Dashboard) failing(ctx context.Context, b *budget, data *overviewData, reuse bool) error {
	rows, recent, checked, unchecked, err := d.scanFailing(ctx, data.Now, reuse)
	if err != nil {
		return err
	}
	data.recent, data.JobsChecked, data.JobsUnchecked = recent, checked, unchecked
	for _, row := range rows {
		row.LastError = cutHead(row.LastError, failingErrorShown)
		if !b.take(rowMarkup + 2*escaped(row.Name) + escaped(row.LastError)) {
			data.MoreFailingJobs++
			continue
		}
		data.FailingJobs = append(data.FailingJobs, row)
	}
	if d.cfg.Singletons == nil {
		return nil
	}
	ss, err := d.cfg.Singletons.List(ctx)
	if err != nil {
		return err
	}
	data.allSingletons = ss
	for _, s := range ss {
		switch s.Status {
		case "failing", "stale", "unplaced":
		default:
			continue
		}
		row := singletonRowOf(s, data.Now, false)
		row.LastError = cutHead(row.LastError, failingErrorShown)
		if !b.take(rowMarkup + 2*escaped(row.Name) + escapedAll(row.LastError, row.Holder)) {
			data.MoreFailingSingletons++
			continue
		}
		data.FailingSingletons = append(data.FailingSingletons, row)
	}
	return nil
}

// failingErrorShown bounds a last error on the overview (bytes); the job's
// page has it whole.
const failingErrorShown = 2000

type historyData struct {
	LeaseName string
	Events    []sqlstore.LeaseEvent
	Next      string
	First     bool
	// Hour and Day: who led over the last hour and day (SVG).
	Hour, Day template.HTML
}

// timelines draws the history page's pictures, within b.
func (d *Dashboard) timelines(ctx context.Context, b *budget, data *historyData) error {
	l, err := d.cfg.Store.Lease(ctx, data.LeaseName)
	found := err == nil
	if err != nil && !errors.Is(err, sqlease.ErrNoLease) {
		return err
	}
	now := l.ObservedAt
	if !found || now.IsZero() {
		if now, err = d.cfg.Store.Now(ctx); err != nil {
			return err
		}
	}
	for _, p := range []struct {
		to     *template.HTML
		id     string
		window time.Duration
	}{{&data.Hour, "timeline-hour", time.Hour}, {&data.Day, "timeline-day", 24 * time.Hour}} {
		svg, err := d.timeline(ctx, p.id, data.LeaseName, l, found, p.window, now)
		if err != nil {
			return err
		}
		if b.take(len(svg)) {
			*p.to = svg
		}
	}
	return nil
}

func (d *Dashboard) history(r *http.Request, v *view) (string, error) {
	q := r.URL.Query()
	name := q.Get("lease")
	if name == "" {
		name = d.cfg.Elector.LeaseName()
	}
	var before int64
	if s := q.Get("after"); s != "" {
		var err error
		if before, err = strconv.ParseInt(s, 10, 64); err != nil || before < 1 {
			return "", fmt.Errorf("%w: after: %q is not a page cursor", errBadParam, s)
		}
	}
	events, err := d.cfg.Store.LeaseHistory(r.Context(), name, before, historyPage+1)
	if err != nil {
		return "", err
	}
	data := historyData{LeaseName: name, First: before == 0}
	b := &budget{left: d.cfg.PageBudget}
	b.take(escaped(name) * 3)
	if data.First && !strings.HasPrefix(name, nodePrefix) {
		if err := d.timelines(r.Context(), b, &data); err != nil {
			return "", err
		}
	}
	shown := eventsWithin(b, events[:min(len(events), historyPage)])
	if len(shown) < len(events) && len(shown) > 0 {
		data.Next = strconv.FormatInt(shown[len(shown)-1].ID, 10)
	}
	data.Events = shown
	if !data.First {
		v.Refresh = 0 // an older page does not change
	}
	v.Title, v.Nav, v.Data = "Leadership history", "history", data
	return "history", nil
}

// eventsWithin returns the first events that fit in b (at least one: a
// reason is at most 500 bytes).
func eventsWithin(b *budget, events []sqlstore.LeaseEvent) []sqlstore.LeaseEvent {
	for i, e := range events {
		if !b.take(rowMarkup+escapedAll(e.Holder, e.Reason, e.Event)) && i > 0 {
			return events[:i]
		}
	}
	return events
}

type jobRow struct {
	sqlease.Job
	State    string
	Schedule string
	Last     *sqlease.Run
	// Breaker is the state of the job's breaker at the page's database
	// time ("" without one), since BreakerSince.
	Breaker      string
	BreakerSince time.Time
	// Failures counts its newest finished runs that failed in a row (of
	// the last recentRuns); LastError is the newest one's error, as the
	// API shows it (for the overview).
	Failures  int
	LastError string
	recent    []sqlease.Run // its newest runs, for the overview's picture
}

// recentRuns is how many of a job's newest runs its row reads: enough to
// see failures in a row through retries, one index range.
const recentRuns = 5

// failed reports whether o is a failed outcome.
func failed(o sqlease.Outcome) bool {
	return o == sqlease.OutcomeFailed || o == sqlease.OutcomeTimedOut || o == sqlease.OutcomeAbandoned
}

type jobsData struct {
	Now     time.Time
	Jobs    []jobRow
	Skipped []string
	Next    string
	Prefix  string
	State   string
	After   string
	Scanned int
}

// jobs lists jobs by name, keyset-paged; a name prefix narrows the index
// range, a state filter is applied to at most maxScan rows per page.
func (d *Dashboard) jobs(r *http.Request, v *view) (string, error) {
	ctx := r.Context()
	q := r.URL.Query()
	data := jobsData{Prefix: strings.TrimSpace(q.Get("prefix")), State: q.Get("state"), After: q.Get("after")}
	switch data.State {
	case "", "active", "paused", "running", "failing":
	default:
		return "", fmt.Errorf("%w: state: %q is not one of active, paused, running, failing", errBadParam, data.State)
	}
	now, err := d.cfg.Store.Now(ctx)
	if err != nil {
		return "", err
	}
	data.Now = now
	after := data.After
	if data.Prefix != "" && after < data.Prefix {
		// Names above the prefix start right after it; the prefix itself
		// may be a job's name.
		if j, err := d.cfg.Scheduler.Job(ctx, data.Prefix); err == nil {
			if row, ok := d.jobRow(ctx, j, data.State, now); ok {
				data.Jobs = append(data.Jobs, row)
			}
		}
		after = data.Prefix
	}
	chunk := jobsPage + 1
	if data.State != "" {
		chunk = 200
	}
	b := &budget{left: d.cfg.PageBudget}
	b.take(3 * escapedAll(data.Prefix, data.State, data.After))
	for _, row := range data.Jobs {
		b.take(row.cost())
	}
	more := false
scan:
	for {
		js, skipped, last, err := d.cfg.Scheduler.JobsChecked(ctx, after, chunk)
		if err != nil {
			return "", err
		}
		for _, s := range skipped {
			if b.take(escaped(s.Name) + 2) {
				data.Skipped = append(data.Skipped, s.Name)
			}
		}
		for _, j := range js {
			if data.Prefix != "" && !strings.HasPrefix(j.Name, data.Prefix) {
				break scan
			}
			if len(data.Jobs) == jobsPage || data.Scanned == maxScan {
				more = true
				break scan
			}
			row, ok := d.jobRow(ctx, j, data.State, now)
			if ok && !b.take(row.cost()) && len(data.Jobs) > 0 {
				more = true
				break scan
			}
			data.Scanned++
			if ok {
				data.Jobs = append(data.Jobs, row)
			}
			after = j.Name
		}
		if last > after {
			after = last
		}
		if len(js)+len(skipped) < chunk {
			break
		}
	}
	if more {
		data.Next = after
	}
	v.Title, v.Nav, v.Data = "Jobs", "jobs", data
	return "jobs", nil
}

// cost is what the row renders on the jobs page, in bytes: its name is
// written three times (text, link, and its escaping), its schedule once.
func (r jobRow) cost() int {
	return rowMarkup + 3*escaped(r.Name) + escapedAll(r.Schedule, r.State, r.LockedBy, r.Breaker) + 2*escaped(r.PauseReason)
}

// jobRow builds a row, its breaker's state as of now (database time), and
// reports whether it passes the state filter. Its newest runs are one
// index range. The row holds no action: a page that shows one takes it
// redacted from httpapi.JobOut.
//
// Its state is, first that applies: paused; failing (its newest finished
// run failed: a green "active" must not hide a job failing every run);
// running; done (a one-off that ran); active.
func (d *Dashboard) jobRow(ctx context.Context, j sqlease.Job, state string, now time.Time) (jobRow, bool) {
	j.Action = nil
	row := jobRow{Job: j, State: "active", Schedule: scheduleText(j.Schedule)}
	row.Breaker, row.BreakerSince = j.BreakerState(now)
	if state == "paused" && !j.Paused {
		return row, false // no need to read its runs
	}
	if runs, err := d.cfg.Store.RunsWithoutOutput(ctx, j.Name, recentRuns); err == nil && len(runs) > 0 {
		row.recent = runs
		last := runView(runs[0])
		last.Output, last.Error = "", "" // the jobs page shows the outcome only
		row.Last = &last
	scan:
		for _, r := range runs {
			switch {
			case r.Outcome == sqlease.OutcomeRunning || r.Outcome == sqlease.OutcomeSkipped || r.Outcome == sqlease.OutcomeCancelled:
				continue // not a verdict on the job's health
			case failed(r.Outcome):
				if row.Failures == 0 {
					row.LastError = runView(r).Error
				}
				row.Failures++
				continue
			}
			break scan
		}
	}
	switch {
	case j.Paused:
		row.State = "paused"
	case row.Failures > 0:
		row.State = "failing"
	case j.LockedBy != "":
		row.State = "running"
	case j.NextRunAt.IsZero():
		row.State = "done"
	}
	return row, state == "" || row.State == state
}

func scheduleText(s sqlease.Schedule) string {
	switch {
	case s.Every > 0:
		return "every " + s.Every.String()
	case s.Cron != "":
		if s.Timezone != "" {
			return "cron " + s.Cron + " (" + s.Timezone + ")"
		}
		return "cron " + s.Cron + " (UTC)"
	case !s.At.IsZero():
		return "once at " + s.At.UTC().Format(time.RFC3339)
	}
	return "once, now"
}

type jobData struct {
	Now    time.Time
	Job    jobRow
	Action string
	// ActionSize is the whole redacted action's size when Action is cut.
	ActionSize int
	Runs       []runRow
	Next       string
	First      bool
	// Budget: the page stopped at its byte budget before its last run.
	Budget bool
	// The first page's pictures of its newest runs (SVG, Charted of
	// them).
	RunsChart, Durations, PerNode template.HTML
	Charted                       int
}

// chartRuns bounds the runs the job page's pictures show (one index range).
const chartRuns = 300

// charts draws the job page's pictures of runs (newest first), within b.
func (data *jobData) charts(b *budget, runs []sqlease.Run, now time.Time) {
	if len(runs) == 0 {
		return
	}
	data.Charted = len(runs)
	labels, counts := perHolder(runs)
	for _, p := range []struct {
		to  *template.HTML
		svg template.HTML
	}{
		{&data.RunsChart, runsSVG("runs-chart", runs, now)},
		{&data.Durations, durationsSVG("durations-chart", runs, now)},
		{&data.PerNode, barsSVG("runs-per-node", "Runs executed per node",
			fmt.Sprintf("Of the newest %d runs: %s.", len(runs), countsText(labels, counts)), labels, counts)},
	} {
		if b.take(len(p.svg)) {
			*p.to = p.svg
		}
	}
}

// countsText says counts per label in words.
func countsText(labels []string, counts []int) string {
	parts := make([]string, len(labels))
	for i, l := range labels {
		parts[i] = fmt.Sprintf("%s %d", l, counts[i])
	}
	return strings.Join(parts, ", ")
}

// runRow is a run as the job page shows it: its error and output as the
// API shows them (httpapi.RunOut), the output cut to its end when it alone
// exceeds the page's budget (OutputSize is then the whole).
type runRow struct {
	sqlease.Run
	OutputSize int
	OutputCut  bool
}

// runView is r with its error, output and checkpoint as the API shows
// them.
func runView(r sqlease.Run) sqlease.Run {
	out := httpapi.RunOut(r)
	r.Error, r.Output, r.Checkpoint = out.Error, "", out.Checkpoint
	if out.Output != nil {
		r.Output = *out.Output
	}
	return r
}

func (d *Dashboard) job(r *http.Request, v *view) (string, error) {
	ctx := r.Context()
	name := r.PathValue("name")
	j, err := d.cfg.Scheduler.Job(ctx, name)
	if err != nil {
		return "", err
	}
	now, err := d.cfg.Store.Now(ctx)
	if err != nil {
		return "", err
	}
	row, _ := d.jobRow(ctx, j, "", now)
	data := jobData{Now: now, Job: row, First: true}
	// The action as the API shows it: redacted by httpapi.JobOut.
	var pretty bytes.Buffer
	if redacted := httpapi.JobOut(j).Action; len(j.Action) > 0 && string(redacted) != "null" {
		if err := json.Indent(&pretty, redacted, "", "  "); err != nil {
			pretty.Reset()
			pretty.Write(redacted)
		}
	}
	data.Action = pretty.String()
	b := &budget{left: d.cfg.PageBudget}
	b.take(4*rowMarkup + 4*escaped(name) + escapedAll(row.Schedule, row.LockedBy))
	if escaped(data.Action) > actionShown {
		data.ActionSize = len(data.Action)
		data.Action = cutHead(data.Action, actionShown)
	}
	b.take(escaped(data.Action))
	var runs []sqlease.Run
	if after := r.URL.Query().Get("after"); after == "" {
		// The first page: the pictures of the newest runs (without their
		// outputs), then the table's with them.
		all, err := d.cfg.Store.RunsWithoutOutput(ctx, name, chartRuns)
		if err != nil {
			return "", err
		}
		data.charts(b, all, now)
		if runs, err = d.cfg.Scheduler.Runs(ctx, name, runsPage+1); err != nil {
			return "", err
		}
	} else {
		at, attempt, ok := httpapi.ParseRunCursor(after)
		if !ok {
			return "", fmt.Errorf("%w: after: %q is not a page cursor", errBadParam, after)
		}
		data.First = false
		runs, err = d.cfg.Scheduler.RunsBefore(ctx, name, at, attempt, runsPage+1)
		if err != nil {
			return "", err
		}
	}
	more := len(runs) > runsPage
	for i, r := range runs[:min(len(runs), runsPage)] {
		rr := runRow{Run: runView(r)}
		c := rowMarkup + escapedAll(rr.Holder, rr.Error, rr.Output, string(rr.Outcome), string(rr.Checkpoint))
		if !b.take(c) {
			if i > 0 {
				more, data.Budget = true, true
				break
			}
			// One run over the whole budget: its error's start and its
			// output's end, within it.
			rr.Error = cutHead(rr.Error, b.left/4)
			rr.Checkpoint = nil // the API has it
			b.take(rowMarkup + escapedAll(rr.Holder, rr.Error, string(rr.Outcome)))
			rr.OutputSize, rr.OutputCut = len(rr.Output), true
			rr.Output = cutTail(rr.Output, b.left)
			b.take(escaped(rr.Output))
		}
		data.Runs = append(data.Runs, rr)
	}
	if more && len(data.Runs) > 0 {
		last := data.Runs[len(data.Runs)-1]
		data.Next = last.ScheduledFor.UTC().Format(time.RFC3339Nano) + "/" + strconv.Itoa(last.Attempt)
	}
	if !data.First {
		v.Refresh = 0
	}
	v.Title, v.Nav, v.Data = "Job "+name, "jobs", data
	return "job", nil
}

// actionWords is an action's wording on its confirmation page.
type actionWords struct{ Verb, Explain string }

// actions are the job actions the dashboard offers, with their wording.
var actions = map[string]actionWords{
	"pause":   {"Pause", "No new occurrence starts until it is resumed; a run in flight finishes."},
	"resume":  {"Resume", "Occurrences start again as scheduled (missed ones follow the job's missed-runs policy)."},
	"trigger": {"Trigger", "The job runs once now, besides its schedule."},
	"delete":  {"Delete", "The job and its schedule are removed for good; its run ledger is no longer shown."},
}

type confirmData struct {
	Job, Action, Verb, Explain string
}

func (d *Dashboard) confirm(r *http.Request, v *view) (string, error) {
	return d.confirmAction(r, v, actions, "pause, resume, trigger, delete", "jobs", "confirm", func(ctx context.Context, name string) error {
		_, err := d.cfg.Scheduler.Job(ctx, name)
		return err
	})
}

// confirmAction asks to confirm one of the offered actions (oneOf names
// them) on the job or singleton of the path, once the session may act and
// exists found it; nav and page are the page's tab and template.
func (d *Dashboard) confirmAction(r *http.Request, v *view, offered map[string]actionWords, oneOf, nav, page string, exists func(ctx context.Context, name string) error) (string, error) {
	name, action := r.PathValue("name"), r.URL.Query().Get("action")
	a, ok := offered[action]
	if !ok {
		return "", fmt.Errorf("%w: action: %q is not one of %s", errBadParam, action, oneOf)
	}
	if !v.CanAct {
		return "", fmt.Errorf("%w: this dashboard is read-only here (%s)", errForbidden, d.readOnlyWhy())
	}
	if err := exists(r.Context(), name); err != nil {
		return "", err
	}
	v.Refresh = 0
	v.Title, v.Nav, v.Data = a.Verb+" "+name+"?", nav, confirmData{Job: name, Action: action, Verb: a.Verb, Explain: a.Explain}
	return page, nil
}

var errForbidden = errors.New("forbidden")

// singletonsPage is a page of the singletons, by name.
const singletonsPage = 50

type singletonsData struct {
	Now        time.Time
	Singletons []singletonRow
	After      string
	Next       string
	// Control: Config.Singletons can pause, resume and delete, and this
	// session may act.
	Control bool
}

// singletons lists the singletons by name after ?after=, with their
// definitions (as Config.Singletons gives them: redacted), within the
// page's budget.
func (d *Dashboard) singletons(r *http.Request, v *view) (string, error) {
	ctx := r.Context()
	data := singletonsData{After: r.URL.Query().Get("after")}
	var ss []httpapi.Singleton
	if d.cfg.Singletons != nil {
		var err error
		if ss, err = d.cfg.Singletons.List(ctx); err != nil {
			return "", err
		}
	}
	now, err := d.cfg.Store.Now(ctx)
	if err != nil {
		return "", err
	}
	data.Now = now
	sort.Slice(ss, func(i, j int) bool { return ss[i].Name < ss[j].Name })
	b := &budget{left: d.cfg.PageBudget}
	b.take(3 * escaped(data.After))
	for _, s := range ss {
		if s.Name <= data.After {
			continue
		}
		row := singletonRowOf(s, now, true)
		if len(data.Singletons) == singletonsPage || (!b.take(row.cost()) && len(data.Singletons) > 0) {
			data.Next = data.Singletons[len(data.Singletons)-1].Name
			break
		}
		data.Singletons = append(data.Singletons, row)
	}
	if data.After != "" {
		v.Refresh = 0
	}
	_, control := d.cfg.Singletons.(SingletonControl)
	data.Control = control && v.CanAct
	v.Title, v.Nav, v.Data = "Singletons", "singletons", data
	return "singletons", nil
}

// singletonActions are the singleton actions the dashboard offers, with
// their wording.
var singletonActions = map[string]actionWords{
	"pause": {"Pause", "Its process gets SIGTERM and its stop_timeout on the node that runs it — what it saves until it exits is kept — " +
		"and it runs nowhere until it is resumed."},
	"resume": {"Resume", "It starts again on one node of the fleet, from its last saved state."},
	"delete": {"Delete", "Its process is stopped as for a pause, and its definition and saved state are removed for good."},
}

// singletonControl returns Config.Singletons when it can act, or an
// errForbidden.
func (d *Dashboard) singletonControl() (SingletonControl, error) {
	ctl, ok := d.cfg.Singletons.(SingletonControl)
	if !ok {
		return nil, fmt.Errorf("%w: this dashboard cannot change singletons", errForbidden)
	}
	return ctl, nil
}

// confirmSingleton asks to confirm a singleton action.
func (d *Dashboard) confirmSingleton(r *http.Request, v *view) (string, error) {
	return d.confirmAction(r, v, singletonActions, "pause, resume, delete", "singletons", "singleton_confirm", func(ctx context.Context, name string) error {
		ctl, err := d.singletonControl()
		if err != nil {
			return err
		}
		_, err = ctl.Get(ctx, name)
		return err
	})
}

// actSingleton performs a confirmed singleton action (mayAct), as the API's
// POST /v1/singletons/{name}/pause, /resume and DELETE do.
func (d *Dashboard) actSingleton(w http.ResponseWriter, r *http.Request) {
	name, action := r.PathValue("name"), r.PathValue("action")
	if !d.mayAct(w, r) {
		return
	}
	if _, ok := singletonActions[action]; !ok {
		d.refuse(w, r, http.StatusNotFound, "no action "+action)
		return
	}
	ctl, err := d.singletonControl()
	if err == nil {
		ctx := r.Context()
		switch action {
		case "pause", "resume":
			_, err = ctl.SetPaused(ctx, name, action == "pause")
		case "delete":
			err = ctl.Delete(ctx, name)
		}
	}
	if err != nil {
		d.fail(w, r, err)
		return
	}
	d.log.Info("dashboard_action", slog.String("action", action), slog.String("singleton", name))
	http.Redirect(w, r, "/ui/singletons?done="+action, http.StatusSeeOther)
}

func (d *Dashboard) readOnlyWhy() string {
	if d.cfg.APIToken != "" {
		return "sign in with the API token to act"
	}
	return "the node listens beyond loopback without an API token"
}

// mayAct checks a confirmed action's request — same origin, a session
// that may act, its CSRF token — and answers the refusal itself when it
// fails.
func (d *Dashboard) mayAct(w http.ResponseWriter, r *http.Request) bool {
	if why := netguard.CrossSite(r, false); why != "" {
		d.refuse(w, r, http.StatusForbidden, why+": cross-site requests may not change anything")
		return false
	}
	s, err := d.sessionOf(r)
	if err != nil {
		d.fail(w, r, err)
		return false
	}
	if !d.canAct(s) {
		d.refuse(w, r, http.StatusForbidden, "read-only: "+d.readOnlyWhy())
		return false
	}
	if err := readForm(w, r, 4096); err != nil {
		d.refuse(w, r, formStatus(err), "form: "+err.Error())
		return false
	}
	if !d.csrfOK(s, r) {
		d.refuse(w, r, http.StatusForbidden, "the form's CSRF token is missing or stale: reload the page and try again")
		return false
	}
	return true
}

// act performs a confirmed job action (mayAct).
func (d *Dashboard) act(w http.ResponseWriter, r *http.Request) {
	name, action := r.PathValue("name"), r.PathValue("action")
	if !d.mayAct(w, r) {
		return
	}
	var err error
	ctx := r.Context()
	switch action {
	case "pause":
		// The reason is the API's: bounded and checked by the scheduler.
		_, err = d.cfg.Scheduler.PauseWithReason(ctx, name, strings.TrimSpace(r.PostFormValue("reason")))
	case "resume":
		_, err = d.cfg.Scheduler.Resume(ctx, name)
	case "trigger":
		_, err = d.cfg.Scheduler.Trigger(ctx, name)
	case "delete":
		err = d.cfg.Scheduler.Delete(ctx, name)
	default:
		d.refuse(w, r, http.StatusNotFound, "no action "+action)
		return
	}
	if err != nil {
		d.fail(w, r, err)
		return
	}
	d.log.Info("dashboard_action", slog.String("action", action), slog.String("job", name))
	to := "/ui/jobs/" + url.PathEscape(name) + "?done=" + action
	if action == "delete" {
		to = "/ui/jobs?done=delete"
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

func (d *Dashboard) refuse(w http.ResponseWriter, r *http.Request, status int, detail string) {
	d.log.Warn("dashboard_refused", slog.String("path", r.URL.Path), slog.Int("status", status), slog.String("detail", detail))
	d.render(w, status, "error", "layout", &view{Title: http.StatusText(status), Node: d.node(),
		Data: struct {
			Status int
			Detail string
		}{status, detail}})
}
