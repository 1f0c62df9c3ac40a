package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/httpapi"
)

// textOut is a command's result printed for reading (--text) rather than
// as JSON: withStore calls it with standard output.
type textOut func(w io.Writer) error

// table is a tabwriter with the columns every --text table uses: two
// spaces between columns, cells made printable.
type table struct{ w *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{w: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)}
	t.row(header...)
	return t
}

// row writes one line; an empty cell shows as "-" so columns stay aligned
// and readable.
func (t *table) row(cells ...string) {
	for i, c := range cells {
		if c == "" {
			c = "-"
		}
		// A cell is one line of printable text: a tab or newline would
		// break the columns.
		cells[i] = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ").Replace(printable(c))
	}
	fmt.Fprintln(t.w, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.w.Flush() }

// scheduleText is a job's schedule in one cell.
func scheduleText(s httpapi.ScheduleJSON) string {
	switch {
	case s.Every != "":
		return "every " + s.Every
	case s.Cron != "" && s.Timezone != "":
		return "cron " + s.Cron + " " + s.Timezone
	case s.Cron != "":
		return "cron " + s.Cron
	case s.At != "":
		return "at " + s.At
	}
	return "once"
}

// breakerText is a job's breaker in one cell: its state, since when, the
// failures counted against the threshold and the cool-down; "" for none.
func breakerText(b *httpapi.BreakerJSON) string {
	if b == nil {
		return ""
	}
	s := b.State
	if s == "" {
		s = "closed"
	}
	if b.ConsecutiveFailures != nil {
		s += fmt.Sprintf(" %d/%d", *b.ConsecutiveFailures, b.Failures)
	}
	if b.CoolDown != "" {
		s += " cool-down " + b.CoolDown
	}
	if b.Since != "" {
		s += " since " + b.Since
	}
	return s
}

// printNotes prints a table's free-text notes (a paused job's reason, a
// singleton's last error) below it, after a blank line: in a cell, free
// text would stretch every row's columns.
func printNotes(w io.Writer, notes []string) {
	if len(notes) == 0 {
		return
	}
	fmt.Fprintln(w)
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
}

// printJobs is jobs list --text.
func printJobs(w io.Writer, l httpapi.JobList) error {
	t := newTable(w, "NAME", "STATE", "SCHEDULE", "NEXT RUN AT", "LAST RUN AT", "ATTEMPTS", "LOCKED BY", "BREAKER")
	for _, j := range l.Jobs {
		t.row(j.Name, j.State, scheduleText(j.Schedule), j.NextRunAt, j.LastRunAt, fmt.Sprint(j.AttemptCount), j.LockedBy, breakerText(j.Breaker))
	}
	if err := t.flush(); err != nil {
		return err
	}
	var notes []string
	for _, j := range l.Jobs {
		if j.PauseReason != "" {
			notes = append(notes, fmt.Sprintf("paused %s: %s", j.Name, printable(j.PauseReason)))
		}
	}
	printNotes(w, notes)
	if len(l.Jobs) == 0 {
		fmt.Fprintln(w, "no jobs")
	}
	for _, s := range l.Skipped {
		fmt.Fprintf(w, "skipped %s: %s\n", s.Name, printable(s.Error))
	}
	if l.Next != "" {
		fmt.Fprintf(w, "more: --after %s\n", l.Next)
	}
	return nil
}

// printSingletons is singletons list --text.
func printSingletons(w io.Writer, l httpapi.SingletonList) error {
	t := newTable(w, "NAME", "STATUS", "HOLDER", "EPOCH", "HEARTBEAT AT", "STATE SAVED AT", "RESTARTS")
	for _, s := range l.Singletons {
		t.row(s.Name, s.Status, s.Holder, fmt.Sprint(s.Epoch), s.HeartbeatAt, s.StateSavedAt, fmt.Sprint(s.Restarts))
	}
	if err := t.flush(); err != nil {
		return err
	}
	var notes []string
	for _, s := range l.Singletons {
		if s.LastError != "" {
			notes = append(notes, fmt.Sprintf("last error of %s at %s: %s", s.Name, s.LastErrorAt, printable(s.LastError)))
		}
	}
	printNotes(w, notes)
	if len(l.Singletons) == 0 {
		fmt.Fprintln(w, "no singletons")
	}
	if l.Next != "" {
		fmt.Fprintf(w, "more: --after %s\n", l.Next)
	}
	return nil
}

// overlapText is a job's overlap policy, with allow's bound.
func overlapText(j httpapi.Job) string {
	if j.Overlap == string(sqlease.OverlapAllow) && j.MaxConcurrent > 0 {
		return fmt.Sprintf("allow, at most %d at once", j.MaxConcurrent)
	}
	return j.Overlap
}

// printJob is jobs get --text: the job's fields, then its latest runs as
// jobs runs --text prints them.
func printJob(w io.Writer, j httpapi.Job, runs []sqlease.Run) error {
	t := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, f := range [][2]string{
		{"name", j.Name}, {"state", j.State}, {"pause reason", j.PauseReason}, {"breaker", breakerText(j.Breaker)},
		{"schedule", scheduleText(j.Schedule)},
		{"action", string(j.Action)}, {"missed runs", j.MissedRuns}, {"overlap", overlapText(j)}, {"lock timeout", j.LockTimeout},
		{"next run at", j.NextRunAt}, {"last run at", j.LastRunAt}, {"attempts", fmt.Sprint(j.AttemptCount)},
		{"locked by", j.LockedBy}, {"created at", j.CreatedAt}, {"modified at", j.LastModifiedAt},
	} {
		v := f[1]
		if v == "" {
			v = "-"
		}
		fmt.Fprintf(t, "%s:\t%s\n", f[0], printable(v))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nlatest runs (newest first):")
	printRuns(w, runs, "")
	return nil
}
