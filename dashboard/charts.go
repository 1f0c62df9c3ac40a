package dashboard

import (
	"context"
	"fmt"
	"html"
	"html/template"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// The pictures: SVG written here on the server, inline in the page, so
// they need no JavaScript and no build step. Every text in them is
// escaped (esc); every picture has a <title> and a <desc> (role="img",
// aria-labelledby) that say in words what it shows, and every mark a
// <title> of its own (a tooltip, read by screen readers). Colours come from
// classes in style.css, so the pictures follow the light and dark themes
// and the page's Content-Security-Policy (no inline style).

// Geometry of the pictures, in viewBox units.
const (
	chartW     = 960
	chartLeft  = 150 // lane labels
	chartRight = 10
	laneH      = 24
	axisH      = 22
)

func esc(s string) string { return html.EscapeString(s) }

// clock is a time on an axis: HH:MM UTC, with seconds for short spans.
func clock(t time.Time, span time.Duration) string {
	if span <= 10*time.Minute {
		return t.UTC().Format("15:04:05")
	}
	return t.UTC().Format("15:04")
}

// xOf maps t in [from, to] onto the plot's width.
func xOf(t, from, to time.Time) float64 {
	w := float64(chartW - chartLeft - chartRight)
	f := float64(t.Sub(from)) / float64(to.Sub(from))
	return chartLeft + w*min(max(f, 0), 1)
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

// axis writes the time axis at y: ticks at round steps.
func axis(b *strings.Builder, from, to time.Time, y int) {
	span := to.Sub(from)
	step := time.Minute
	for _, s := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 10 * time.Minute,
		30 * time.Minute, time.Hour, 3 * time.Hour, 6 * time.Hour, 24 * time.Hour} {
		step = s
		if span/s <= 8 {
			break
		}
	}
	fmt.Fprintf(b, `<g class="axis" aria-hidden="true"><line x1="%d" y1="%d" x2="%d" y2="%d"/>`, chartLeft, y, chartW-chartRight, y)
	for t := from.Truncate(step).Add(step); t.Before(to); t = t.Add(step) {
		x := num(xOf(t, from, to))
		fmt.Fprintf(b, `<line x1="%s" y1="%d" x2="%s" y2="%d"/><text x="%s" y="%d" text-anchor="middle">%s</text>`,
			x, y, x, y+4, x, y+16, clock(t, span))
	}
	b.WriteString(`</g>`)
}

// term is one holder's term of the leader lease as the history tells it.
type term struct {
	Holder     string
	Epoch      int64
	Start, End time.Time
	// How it ended: released, lost, expired (its lease ran out without a
	// release; when taken over, End is the latest its last renewal can have
	// been), or leading (still).
	Ended string
}

// terms rebuilds the terms of a lease from its history (newest first),
// its current row and the lease duration, as of now.
func terms(events []sqlstore.LeaseEvent, current sqlease.Lease, hasCurrent bool, duration time.Duration, now time.Time) []term {
	var out []term
	open := -1
	for i := len(events) - 1; i >= 0; i-- {
		e := events[i]
		switch e.Event {
		case sqlstore.EventAcquired, sqlstore.EventTakenOver:
			if open >= 0 {
				p := &out[open]
				p.End, p.Ended = e.At, "expired"
				if e.Event == sqlstore.EventTakenOver {
					// Its lease ran out before the takeover, a whole lease
					// duration after its last renewal: no one led between.
					p.End = e.At.Add(-duration)
				}
				if p.End.Before(p.Start) {
					p.End = p.Start
				}
			}
			out = append(out, term{Holder: e.Holder, Epoch: e.Epoch, Start: e.At})
			open = len(out) - 1
		case sqlstore.EventReleased, sqlstore.EventLost:
			if open >= 0 && out[open].Epoch == e.Epoch {
				out[open].End, out[open].Ended = e.At, e.Event
				open = -1
			} else if open < 0 && len(out) == 0 {
				// Its start is older than the events read.
				out = append(out, term{Holder: e.Holder, Epoch: e.Epoch, End: e.At, Ended: e.Event})
			}
		}
	}
	if open >= 0 {
		p := &out[open]
		switch {
		case hasCurrent && current.Epoch == p.Epoch && current.Expired():
			p.End, p.Ended = current.RenewedAt, "expired"
		default:
			p.End, p.Ended = now, "leading"
		}
	}
	return out
}

// timelineSVG draws who led the lease when over [now-window, now]: one lane
// per holder, a bar per term with its epoch, hatched bands where no one
// led.
func timelineSVG(id, lease string, ts []term, window time.Duration, now time.Time) template.HTML {
	from := now.Add(-window)
	title := "over the last " + windowText(window)
	// A history younger than the window: drawn from its start (and a
	// tenth more), not squeezed against the right edge.
	if len(ts) > 0 && !ts[0].Start.IsZero() && ts[0].Start.After(from) {
		from = ts[0].Start.Add(-max(now.Sub(ts[0].Start)/10, time.Second))
		title = "since " + stampTime(ts[0].Start) + ", when its history begins"
	}
	var lanes []string
	lane := map[string]int{}
	var shown []term
	for _, t := range ts {
		if !t.End.After(from) {
			continue
		}
		if t.Start.IsZero() || t.Start.Before(from) {
			t.Start = from
		}
		shown = append(shown, t)
		if _, ok := lane[t.Holder]; !ok {
			lane[t.Holder] = len(lanes)
			lanes = append(lanes, t.Holder)
		}
	}
	// The gaps: the window less the terms, from the first term on (before
	// it the history read says nothing).
	type gap struct{ from, to time.Time }
	var gaps []gap
	sorted := append([]term(nil), shown...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Start.Before(sorted[j].Start) })
	if len(sorted) > 0 {
		cursor := sorted[0].Start
		for _, t := range sorted {
			if t.Start.After(cursor) {
				gaps = append(gaps, gap{cursor, t.Start})
			}
			if t.End.After(cursor) {
				cursor = t.End
			}
		}
		if now.Sub(cursor) > time.Millisecond {
			gaps = append(gaps, gap{cursor, now})
		}
	}
	h := max(len(lanes), 1)*laneH + axisH + 6
	var noLeader time.Duration
	for _, g := range gaps {
		noLeader += g.to.Sub(g.from)
	}
	var desc strings.Builder
	fmt.Fprintf(&desc, "%d terms by %d holders; no leader for %s in all", len(shown), len(lanes), human(noLeader))
	for i, t := range shown {
		if i == 12 {
			fmt.Fprintf(&desc, "; and %d more terms", len(shown)-i)
			break
		}
		fmt.Fprintf(&desc, "; %s led epoch %d from %s for %s", t.Holder, t.Epoch, stampTime(t.Start), human(t.End.Sub(t.Start)))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart timeline" id="%s" viewBox="0 0 %d %d" width="100%%" role="img" aria-labelledby="%s-t %s-d" data-from="%s" data-to="%s">`,
		esc(id), chartW, h, esc(id), esc(id), from.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(&b, `<title id="%s-t">Who led %s %s</title><desc id="%s-d">%s</desc>`,
		esc(id), esc(lease), title, esc(id), esc(desc.String()))
	fmt.Fprintf(&b, `<defs><pattern id="%s-hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" class="gap-bg"/><line x1="0" y1="0" x2="0" y2="6" class="gap-line"/></pattern></defs>`, esc(id))
	for i, l := range lanes {
		fmt.Fprintf(&b, `<text class="lane" x="%d" y="%d" text-anchor="end">%s</text>`, chartLeft-8, i*laneH+19, esc(cut(l, 20)))
	}
	for _, g := range gaps {
		x1, x2 := xOf(g.from, from, now), xOf(g.to, from, now)
		fmt.Fprintf(&b, `<rect class="gap" x="%s" y="2" width="%s" height="%d" fill="url(#%s-hatch)" data-from="%s" data-to="%s"><title>No leader for %s, from %s to %s</title></rect>`,
			num(x1), num(max(x2-x1, 1.5)), max(len(lanes), 1)*laneH+2, esc(id), g.from.UTC().Format(time.RFC3339Nano), g.to.UTC().Format(time.RFC3339Nano),
			human(g.to.Sub(g.from)), stampTime(g.from), stampTime(g.to))
	}
	for _, t := range shown {
		i := lane[t.Holder]
		x1, x2 := xOf(t.Start, from, now), xOf(t.End, from, now)
		w := max(x2-x1, 1.5)
		how := map[string]string{"released": "released it", "lost": "lost it", "expired": "its lease ran out without a release",
			"leading": "leads still"}[t.Ended]
		fmt.Fprintf(&b, `<rect class="term c%d" x="%s" y="%d" width="%s" height="%d" rx="3" data-holder="%s" data-epoch="%d" data-ended="%s"><title>%s led epoch %d from %s to %s (%s); %s</title></rect>`,
			i%8, num(x1), i*laneH+5, num(w), laneH-6, esc(t.Holder), t.Epoch, t.Ended, esc(t.Holder), t.Epoch, stampTime(t.Start), stampTime(t.End),
			human(t.End.Sub(t.Start)), how)
		if label := strconv.FormatInt(t.Epoch, 10); w > float64(7*len(label)+6) {
			fmt.Fprintf(&b, `<text class="epoch" x="%s" y="%d" aria-hidden="true">%s</text>`, num(x1+4), i*laneH+18, label)
		}
	}
	if len(lanes) == 0 {
		fmt.Fprintf(&b, `<text class="lane" x="%d" y="17">No leadership recorded in this window.</text>`, chartLeft)
	}
	axis(&b, from, now, max(len(lanes), 1)*laneH+6)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// windowText names a window: hour, day, or a duration.
func windowText(w time.Duration) string {
	switch w {
	case time.Hour:
		return "hour"
	case 24 * time.Hour:
		return "day"
	}
	return human(w)
}

func stampTime(t time.Time) string { return t.UTC().Format("15:04:05.000") }

// cut shortens s to n characters for a label (the <title> has it whole).
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// outcomes in the order the run charts stack them.
var outcomes = []sqlease.Outcome{sqlease.OutcomeSucceeded, sqlease.OutcomeFailed, sqlease.OutcomeTimedOut, sqlease.OutcomeAbandoned,
	sqlease.OutcomeCancelled, sqlease.OutcomeSkipped, sqlease.OutcomeRunning}

// runsSVG draws a job's runs (newest first) over time: a stacked bar per
// time bucket, by outcome.
func runsSVG(id string, runs []sqlease.Run, now time.Time) template.HTML {
	const buckets, plotH = 30, 90
	if len(runs) == 0 {
		return ""
	}
	from := padded(runs[len(runs)-1].StartedAt, now)
	span := now.Sub(from)
	counts := make([]map[sqlease.Outcome]int, buckets)
	total := map[sqlease.Outcome]int{}
	for _, r := range runs {
		i := min(max(int(float64(r.StartedAt.Sub(from))/float64(span)*buckets), 0), buckets-1)
		if counts[i] == nil {
			counts[i] = map[sqlease.Outcome]int{}
		}
		counts[i][r.Outcome]++
		total[r.Outcome]++
	}
	peak := 1
	for _, c := range counts {
		n := 0
		for _, k := range c {
			n += k
		}
		peak = max(peak, n)
	}
	var desc []string
	for _, o := range outcomes {
		if total[o] > 0 {
			desc = append(desc, fmt.Sprintf("%d %s", total[o], o))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart runs" id="%s" viewBox="0 0 %d %d" width="100%%" role="img" aria-labelledby="%s-t %s-d">`, esc(id), chartW, plotH+axisH+8, esc(id), esc(id))
	fmt.Fprintf(&b, `<title id="%s-t">Runs over the last %s, by outcome</title><desc id="%s-d">The newest %d runs: %s.</desc>`,
		esc(id), human(span), esc(id), len(runs), esc(strings.Join(desc, ", ")))
	fmt.Fprintf(&b, `<text class="lane" x="%d" y="14" text-anchor="end">%d runs</text><text class="lane" x="%d" y="%d" text-anchor="end">0</text>`,
		chartLeft-8, peak, chartLeft-8, plotH+4)
	bw := float64(chartW-chartLeft-chartRight) / buckets
	for i, c := range counts {
		if len(c) == 0 {
			continue
		}
		start := from.Add(time.Duration(float64(span) * float64(i) / buckets))
		end := from.Add(time.Duration(float64(span) * float64(i+1) / buckets))
		var parts []string
		for _, o := range outcomes {
			if c[o] > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", c[o], o))
			}
		}
		fmt.Fprintf(&b, `<g class="bucket" data-runs="%s"><title>%s to %s: %s</title>`, esc(strings.Join(parts, ",")),
			clock(start, time.Second), clock(end, time.Second), esc(strings.Join(parts, ", ")))
		y := float64(plotH + 4)
		for _, o := range outcomes {
			if c[o] == 0 {
				continue
			}
			hh := float64(plotH) * float64(c[o]) / float64(peak)
			y -= hh
			fmt.Fprintf(&b, `<rect class="out-%s" x="%s" y="%s" width="%s" height="%s"/>`, o, num(chartLeft+bw*float64(i)+1), num(y), num(bw-2), num(hh))
		}
		b.WriteString(`</g>`)
	}
	axis(&b, from, now, plotH+6)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// padded is where a picture of [oldest, now] starts: a tenth earlier (a
// second at least), so the oldest mark is not on the edge.
func padded(oldest, now time.Time) time.Time {
	return oldest.Add(-max(now.Sub(oldest)/10, time.Second))
}

// durationsSVG draws each finished run's duration (runs newest first) at
// its start: a dot per run, coloured by outcome.
func durationsSVG(id string, runs []sqlease.Run, now time.Time) template.HTML {
	const plotH = 110
	var done []sqlease.Run
	var ds []time.Duration
	var longest time.Duration
	for _, r := range runs {
		if r.FinishedAt.IsZero() || r.Outcome == sqlease.OutcomeSkipped {
			continue
		}
		done = append(done, r)
		d := r.FinishedAt.Sub(r.StartedAt)
		ds = append(ds, d)
		longest = max(longest, d)
	}
	if len(done) == 0 {
		return ""
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	from := padded(done[len(done)-1].StartedAt, now)
	top := max(longest, time.Millisecond)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart durations" id="%s" viewBox="0 0 %d %d" width="100%%" role="img" aria-labelledby="%s-t %s-d">`, esc(id), chartW, plotH+axisH+10, esc(id), esc(id))
	fmt.Fprintf(&b, `<title id="%s-t">How long each run took</title><desc id="%s-d">%d finished runs: median %s, 95th percentile %s, longest %s.</desc>`,
		esc(id), esc(id), len(done), human(ds[len(ds)/2]), human(ds[min(len(ds)*95/100, len(ds)-1)]), human(longest))
	fmt.Fprintf(&b, `<text class="lane" x="%d" y="14" text-anchor="end">%s</text><text class="lane" x="%d" y="%d" text-anchor="end">0</text>`,
		chartLeft-8, esc(human(top)), chartLeft-8, plotH+6)
	fmt.Fprintf(&b, `<line class="grid" x1="%d" y1="8" x2="%d" y2="8" aria-hidden="true"/>`, chartLeft, chartW-chartRight)
	for _, r := range done {
		d := r.FinishedAt.Sub(r.StartedAt)
		x := xOf(r.StartedAt, from, now)
		y := float64(plotH+6) - float64(plotH-2)*float64(d)/float64(top)
		fmt.Fprintf(&b, `<circle class="out-%s" cx="%s" cy="%s" r="3.5" data-ms="%d"><title>%s attempt %d, started %s on %s: %s, %s</title></circle>`,
			r.Outcome, num(x), num(y), d.Milliseconds(), stampTime(r.ScheduledFor), r.Attempt, stampTime(r.StartedAt), esc(r.Holder), human(d), r.Outcome)
	}
	axis(&b, from, now, plotH+8)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// barsSVG draws counts per label as horizontal bars (runs per node).
func barsSVG(id, title, desc string, labels []string, counts []int) template.HTML {
	if len(labels) == 0 {
		return ""
	}
	peak := 1
	for _, c := range counts {
		peak = max(peak, c)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart bars" id="%s" viewBox="0 0 %d %d" width="100%%" role="img" aria-labelledby="%s-t %s-d">`, esc(id), chartW, len(labels)*laneH+6, esc(id), esc(id))
	fmt.Fprintf(&b, `<title id="%s-t">%s</title><desc id="%s-d">%s</desc>`, esc(id), esc(title), esc(id), esc(desc))
	w := float64(chartW - chartLeft - chartRight - 60)
	for i, l := range labels {
		y := i*laneH + 4
		bw := max(w*float64(counts[i])/float64(peak), 1)
		fmt.Fprintf(&b, `<text class="lane" x="%d" y="%d" text-anchor="end">%s</text>`, chartLeft-8, y+15, esc(cut(l, 20)))
		fmt.Fprintf(&b, `<rect class="bar c%d" x="%d" y="%d" width="%s" height="%d" rx="2" data-label="%s" data-count="%d"><title>%s: %d runs</title></rect>`,
			i%8, chartLeft, y+1, num(bw), laneH-6, esc(l), counts[i], esc(l), counts[i])
		fmt.Fprintf(&b, `<text class="count" x="%s" y="%d">%d</text>`, num(chartLeft+bw+6), y+15, counts[i])
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// perHolder counts runs (not skipped ones) by holder, most first.
func perHolder(runs []sqlease.Run) ([]string, []int) {
	n := map[string]int{}
	for _, r := range runs {
		if r.Outcome != sqlease.OutcomeSkipped {
			n[r.Holder]++
		}
	}
	labels := make([]string, 0, len(n))
	for h := range n {
		labels = append(labels, h)
	}
	sort.Slice(labels, func(i, j int) bool {
		if n[labels[i]] != n[labels[j]] {
			return n[labels[i]] > n[labels[j]]
		}
		return labels[i] < labels[j]
	})
	counts := make([]int, len(labels))
	for i, l := range labels {
		counts[i] = n[l]
	}
	return labels, counts
}

// timelineEvents bounds the history one timeline reads (newest first):
// about half as many terms, a few hundred kB of SVG at most.
const timelineEvents = 600

// timeline reads the history of lease back to now-window (at most
// timelineEvents) and draws it; current is the lease's row when found.
func (d *Dashboard) timeline(ctx context.Context, id, lease string, current sqlease.Lease, found bool, window time.Duration, now time.Time) (template.HTML, error) {
	var events []sqlstore.LeaseEvent
	var before int64
	for len(events) < timelineEvents {
		page, err := d.cfg.Store.LeaseHistory(ctx, lease, before, 200)
		if err != nil {
			return "", err
		}
		events = append(events, page...)
		if len(page) < 200 || now.Sub(page[len(page)-1].At) > window {
			break
		}
		before = page[len(page)-1].ID
	}
	return timelineSVG(id, lease, terms(events, current, found, d.cfg.Elector.Config().LeaseDuration, now), window, now), nil
}
