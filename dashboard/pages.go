package dashboard

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
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
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/httpapi"
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
	"ago":  ago,
	"dur":  human,
	"path": url.PathEscape,
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

// nodeRow is one node seen recently.
type nodeRow struct {
	Holder   string
	Roles    []string
	Live     bool
	LastSeen time.Time
	ThisNode bool
}

type overviewData struct {
	Now        time.Time
	LeaseName  string
	Leader     leaderView
	Nodes      []nodeRow
	History    []sqlstore.LeaseEvent
	Singletons []singletonRow
	Others     []sqlease.Lease
}

type singletonRow struct {
	httpapi.Singleton
	HeartbeatAge string
}

func (d *Dashboard) overview(r *http.Request, v *view) (string, error) {
	ctx := r.Context()
	name := d.cfg.Elector.LeaseName()
	leases, err := d.cfg.Store.Leases(ctx)
	if err != nil {
		return "", err
	}
	data := overviewData{LeaseName: name}
	nodes := map[string]*nodeRow{}
	seen := func(holder, role string, l sqlease.Lease) {
		n := nodes[holder]
		if n == nil {
			n = &nodeRow{Holder: holder}
			nodes[holder] = n
		}
		if !l.Expired() {
			n.Live = true
			if role != "" {
				n.Roles = append(n.Roles, role)
			}
		}
		if l.RenewedAt.After(n.LastSeen) {
			n.LastSeen = l.RenewedAt
		}
	}
	for _, l := range leases {
		if data.Now.IsZero() {
			data.Now = l.ObservedAt
		}
		recent := !l.Expired() || l.ObservedAt.Sub(l.ExpiresAt) < seenWithin
		switch {
		case l.Name == name:
			data.Leader = leaderView{Found: true, Lease: l, Live: !l.Expired(), Left: l.ExpiresAt.Sub(l.ObservedAt)}
			if total := l.ExpiresAt.Sub(l.RenewedAt); total > 0 && data.Leader.Live {
				data.Leader.Progress = int(100 * data.Leader.Left / total)
			}
			if recent {
				seen(l.Holder, "leader", l)
			}
		case strings.HasPrefix(l.Name, workerPrefix) && recent:
			seen(l.Holder, "claim worker", l)
		case strings.HasPrefix(l.Name, memberPrefix) && recent:
			seen(l.Holder, "member", l)
		case strings.HasPrefix(l.Name, singletonPrefix) && recent:
			seen(l.Holder, "runs "+strings.TrimPrefix(l.Name, singletonPrefix), l)
		case strings.HasPrefix(l.Name, nodePrefix):
			// A node's presence (history.Presence): up, whatever its role.
			if recent {
				seen(l.Holder, "", l)
			}
		case !strings.HasPrefix(l.Name, workerPrefix) && !strings.HasPrefix(l.Name, memberPrefix) && !strings.HasPrefix(l.Name, singletonPrefix):
			data.Others = append(data.Others, l)
		}
	}
	if data.Now.IsZero() {
		if data.Now, err = d.cfg.Store.Now(ctx); err != nil {
			return "", err
		}
	}
	// This node is seen: it is serving this page.
	me := d.cfg.Elector.HolderID()
	if nodes[me] == nil {
		nodes[me] = &nodeRow{Holder: me, LastSeen: data.Now}
	}
	nodes[me].Live, nodes[me].ThisNode = true, true
	if len(nodes[me].Roles) == 0 {
		nodes[me].Roles = []string{"follower"}
	}
	if data.History, err = d.cfg.Store.LeaseHistory(ctx, name, 0, overviewHist); err != nil {
		return "", err
	}
	// Recent leaders that hold nothing now (killed, stopped, cut off):
	// the on-call engineer wants to see them gone.
	for _, e := range data.History {
		if n := nodes[e.Holder]; n == nil && data.Now.Sub(e.At) < seenWithin {
			nodes[e.Holder] = &nodeRow{Holder: e.Holder, LastSeen: e.At}
		}
	}
	for _, n := range nodes {
		switch {
		case len(n.Roles) == 0 && n.Live:
			n.Roles = []string{"follower"}
		case len(n.Roles) == 0:
			n.Roles = []string{"not seen since: stopped, killed or cut off"}
		}
		data.Nodes = append(data.Nodes, *n)
	}
	sort.Slice(data.Nodes, func(i, j int) bool {
		a, b := data.Nodes[i], data.Nodes[j]
		if a.Live != b.Live {
			return a.Live
		}
		return a.Holder < b.Holder
	})
	if d.cfg.Singletons != nil {
		ss, err := d.cfg.Singletons.List(ctx)
		if err != nil {
			return "", err
		}
		for _, s := range ss {
			row := singletonRow{Singleton: s}
			if t, err := time.Parse(time.RFC3339Nano, s.HeartbeatAt); err == nil {
				row.HeartbeatAge = human(data.Now.Sub(t))
			}
			data.Singletons = append(data.Singletons, row)
		}
	}
	v.Title, v.Nav, v.Data = "Overview", "overview", data
	return "overview", nil
}

type historyData struct {
	LeaseName string
	Events    []sqlstore.LeaseEvent
	Next      string
	First     bool
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
	if len(events) > historyPage {
		events = events[:historyPage]
		data.Next = strconv.FormatInt(events[historyPage-1].ID, 10)
	}
	data.Events = events
	if !data.First {
		v.Refresh = 0 // an older page does not change
	}
	v.Title, v.Nav, v.Data = "Leadership history", "history", data
	return "history", nil
}

type jobRow struct {
	sqlease.Job
	State    string
	Schedule string
	Last     *sqlease.Run
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
			if row, ok := d.jobRow(ctx, j, data.State); ok {
				data.Jobs = append(data.Jobs, row)
			}
		}
		after = data.Prefix
	}
	chunk := jobsPage + 1
	if data.State != "" {
		chunk = 200
	}
	more := false
scan:
	for {
		js, skipped, last, err := d.cfg.Scheduler.JobsChecked(ctx, after, chunk)
		if err != nil {
			return "", err
		}
		for _, s := range skipped {
			data.Skipped = append(data.Skipped, s.Name)
		}
		for _, j := range js {
			if data.Prefix != "" && !strings.HasPrefix(j.Name, data.Prefix) {
				break scan
			}
			if len(data.Jobs) == jobsPage || data.Scanned == maxScan {
				more = true
				break scan
			}
			data.Scanned++
			if row, ok := d.jobRow(ctx, j, data.State); ok {
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

// jobRow builds a row and reports whether it passes the state filter. The
// last run is one index lookup.
func (d *Dashboard) jobRow(ctx context.Context, j sqlease.Job, state string) (jobRow, bool) {
	row := jobRow{Job: j, State: "active", Schedule: scheduleText(j.Schedule)}
	switch {
	case j.Paused:
		row.State = "paused"
	case j.LockedBy != "":
		row.State = "running"
	case j.NextRunAt.IsZero():
		row.State = "done"
	}
	if state != "" && state != "failing" && row.State != state {
		return row, false
	}
	if runs, err := d.cfg.Scheduler.Runs(ctx, j.Name, 1); err == nil && len(runs) == 1 {
		row.Last = &runs[0]
	}
	if state == "failing" {
		return row, row.Last != nil && row.Last.Outcome != sqlease.OutcomeSucceeded && row.Last.Outcome != sqlease.OutcomeRunning
	}
	return row, true
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
	Runs   []sqlease.Run
	Next   string
	First  bool
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
	row, _ := d.jobRow(ctx, j, "")
	data := jobData{Now: now, Job: row, First: true}
	var pretty strings.Builder
	if len(j.Action) > 0 {
		var x any
		if json.Unmarshal(j.Action, &x) == nil {
			b, _ := json.MarshalIndent(x, "", "  ")
			pretty.Write(b)
		} else {
			pretty.Write(j.Action)
		}
	}
	data.Action = pretty.String()
	var runs []sqlease.Run
	if after := r.URL.Query().Get("after"); after != "" {
		at, attempt, ok := httpapi.ParseRunCursor(after)
		if !ok {
			return "", fmt.Errorf("%w: after: %q is not a page cursor", errBadParam, after)
		}
		data.First = false
		runs, err = d.cfg.Scheduler.RunsBefore(ctx, name, at, attempt, runsPage+1)
	} else {
		runs, err = d.cfg.Scheduler.Runs(ctx, name, runsPage+1)
	}
	if err != nil {
		return "", err
	}
	if len(runs) > runsPage {
		runs = runs[:runsPage]
		last := runs[runsPage-1]
		data.Next = last.ScheduledFor.UTC().Format(time.RFC3339Nano) + "/" + strconv.Itoa(last.Attempt)
	}
	data.Runs = runs
	if !data.First {
		v.Refresh = 0
	}
	v.Title, v.Nav, v.Data = "Job "+name, "jobs", data
	return "job", nil
}

// actions are the job actions the dashboard offers, with their wording.
var actions = map[string]struct{ Verb, Explain string }{
	"pause":   {"Pause", "No new occurrence starts until it is resumed; a run in flight finishes."},
	"resume":  {"Resume", "Occurrences start again as scheduled (missed ones follow the job's missed-runs policy)."},
	"trigger": {"Trigger", "The job runs once now, besides its schedule."},
	"delete":  {"Delete", "The job and its schedule are removed for good; its run ledger is no longer shown."},
}

type confirmData struct {
	Job, Action, Verb, Explain string
}

func (d *Dashboard) confirm(r *http.Request, v *view) (string, error) {
	name, action := r.PathValue("name"), r.URL.Query().Get("action")
	a, ok := actions[action]
	if !ok {
		return "", fmt.Errorf("%w: action: %q is not one of pause, resume, trigger, delete", errBadParam, action)
	}
	if !v.CanAct {
		return "", fmt.Errorf("%w: this dashboard is read-only here (%s)", errForbidden, d.readOnlyWhy())
	}
	if _, err := d.cfg.Scheduler.Job(r.Context(), name); err != nil {
		return "", err
	}
	v.Refresh = 0
	v.Title, v.Nav, v.Data = a.Verb+" "+name+"?", "jobs", confirmData{Job: name, Action: action, Verb: a.Verb, Explain: a.Explain}
	return "confirm", nil
}

var errForbidden = errors.New("forbidden")

func (d *Dashboard) readOnlyWhy() string {
	if d.cfg.APIToken != "" {
		return "sign in with the API token to act"
	}
	return "the node listens beyond loopback without an API token"
}

// act performs a confirmed action: same origin, a session that may act,
// its CSRF token.
func (d *Dashboard) act(w http.ResponseWriter, r *http.Request) {
	name, action := r.PathValue("name"), r.PathValue("action")
	s := d.sessionOf(r)
	if why := crossSite(r); why != "" {
		d.refuse(w, r, http.StatusForbidden, why+": cross-site requests may not change anything")
		return
	}
	if !d.canAct(s) {
		d.refuse(w, r, http.StatusForbidden, "read-only: "+d.readOnlyWhy())
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		d.refuse(w, r, http.StatusBadRequest, "form: "+err.Error())
		return
	}
	want := d.csrf(s)
	if want == "" || subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(want)) != 1 {
		d.refuse(w, r, http.StatusForbidden, "the form's CSRF token is missing or stale: reload the page and try again")
		return
	}
	ctx := r.Context()
	var err error
	switch action {
	case "pause":
		_, err = d.cfg.Scheduler.Pause(ctx, name)
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

type loginData struct {
	Next, Error string
}

func (d *Dashboard) loginPage(w http.ResponseWriter, r *http.Request) {
	v := &view{Title: "Sign in", Node: d.node(), TokenSet: d.cfg.APIToken != "", Data: loginData{Next: safeNext(r.URL.Query().Get("next"))}}
	d.render(w, http.StatusOK, "login", "layout", v)
}

func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	if why := crossSite(r); why != "" {
		d.refuse(w, r, http.StatusForbidden, why+": cross-site requests may not sign in")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	if err := r.ParseForm(); err != nil {
		d.refuse(w, r, http.StatusBadRequest, "form: "+err.Error())
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	got := sha256.Sum256([]byte(strings.TrimSpace(r.PostForm.Get("token"))))
	if !d.signInAllowed() {
		w.Header().Set("Retry-After", "1")
		d.refuse(w, r, http.StatusTooManyRequests, "too many failed sign-ins: wait a second")
		return
	}
	if d.cfg.APIToken == "" || subtle.ConstantTimeCompare(got[:], d.token[:]) != 1 {
		d.signInFailed()
		d.log.Warn("dashboard_sign_in_failed", slog.String("remote", r.RemoteAddr))
		v := &view{Title: "Sign in", Node: d.node(), TokenSet: d.cfg.APIToken != "", Data: loginData{Next: next, Error: "That is not the API token."}}
		d.render(w, http.StatusUnauthorized, "login", "layout", v)
		return
	}
	d.newSession(w, r, "t")
	sep := "?"
	if strings.Contains(next, "?") {
		sep = "&"
	}
	http.Redirect(w, r, next+sep+"done=login", http.StatusSeeOther)
}

func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request) {
	if why := crossSite(r); why != "" {
		d.refuse(w, r, http.StatusForbidden, why)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/ui/login?done=logout", http.StatusSeeOther)
}

// safeNext keeps a redirect target on this site.
func safeNext(s string) string {
	if s == "" || !strings.HasPrefix(s, "/") || strings.HasPrefix(s, "//") || strings.HasPrefix(s, "/\\") {
		return "/"
	}
	return s
}

// maxFailedSignIns bounds failed sign-ins per second, node-wide: guessing
// stays slow without holding a request slot per guess.
const maxFailedSignIns = 5

func (d *Dashboard) signInAllowed() bool {
	d.failMu.Lock()
	defer d.failMu.Unlock()
	if time.Since(d.failSince) >= time.Second {
		d.failSince, d.failures = time.Now(), 0
	}
	return d.failures < maxFailedSignIns
}

func (d *Dashboard) signInFailed() {
	d.failMu.Lock()
	defer d.failMu.Unlock()
	if time.Since(d.failSince) >= time.Second {
		d.failSince, d.failures = time.Now(), 0
	}
	d.failures++
}
