package dashboard_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/sqlstore"
)

// TestPictures: the pictures say what the data says — the timeline's terms
// (holder, epoch), its gap where a lease ran out before a takeover, a
// holder's name escaped; the job page's runs by outcome, one dot per
// finished run and runs per node; each picture with its title and text
// alternative.
func TestPictures(t *testing.T) {
	s := newSite(t, "", "127.0.0.1:0")
	ctx := context.Background()
	for _, e := range []struct {
		e   sqlstore.LeaseEvent
		ago time.Duration
	}{
		{sqlstore.LeaseEvent{Lease: "lead", Event: sqlstore.EventAcquired, Holder: "node-a", Epoch: 1}, 60 * time.Second},
		{sqlstore.LeaseEvent{Lease: "lead", Event: sqlstore.EventReleased, Holder: "node-a", Epoch: 1, Reason: "shutdown"}, 40 * time.Second},
		{sqlstore.LeaseEvent{Lease: "lead", Event: sqlstore.EventAcquired, Holder: "<b>node-x</b>", Epoch: 2}, 39 * time.Second},
		// node-c takes over epoch 3 from node-x: the lease ran out (6 s,
		// the elector's default duration) before it, which the timeline
		// shows as a gap.
		{sqlstore.LeaseEvent{Lease: "lead", Event: sqlstore.EventTakenOver, Holder: "node-c", Epoch: 3,
			Reason: "the lease of <b>node-x</b> (epoch 2) expired without a release"}, 0},
	} {
		if err := s.store.RecordLeaseEvent(ctx, e.e, e.ago); err != nil {
			t.Fatal(err)
		}
	}
	s.setLease("lead", "node-c", time.Second, 5*time.Second)
	_, body, _ := s.get("/ui/history")
	hour := section(body, `<svg class="chart timeline" id="timeline-hour"`, "</svg>")
	if hour == "" || !strings.Contains(body, `id="timeline-day"`) {
		t.Fatalf("no timelines on the history page:\n%s", body)
	}
	for _, want := range []string{`role="img"`, `aria-labelledby="timeline-hour-t timeline-hour-d"`, `<title id="timeline-hour-t">Who led lead since `, ", when its history begins</title>",
		`data-holder="node-a" data-epoch="1" data-ended="released"`, `data-holder="&lt;b&gt;node-x&lt;/b&gt;" data-epoch="2" data-ended="expired"`,
		`data-holder="node-c" data-epoch="3" data-ended="leading"`, "3 terms by 3 holders"} {
		if !strings.Contains(hour, want) {
			t.Errorf("the hour's timeline lacks %q:\n%s", want, hour)
		}
	}
	if strings.Contains(hour, "<b>") {
		t.Errorf("a holder's name is not escaped:\n%s", hour)
	}
	// The gap before node-c's takeover: from its start less the lease
	// duration to its start.
	var taken time.Time
	if es, err := s.store.LeaseHistory(ctx, "lead", 0, 1); err != nil || len(es) != 1 {
		t.Fatal(err)
	} else {
		taken = es[0].At
	}
	gap := regexp.MustCompile(`<rect class="gap"[^>]*data-from="([^"]+)" data-to="([^"]+)"><title>No leader for 6.0 s`).FindStringSubmatch(hour)
	if gap == nil {
		t.Fatalf("no 6 s gap before the takeover:\n%s", hour)
	}
	from, _ := time.Parse(time.RFC3339Nano, gap[1])
	to, _ := time.Parse(time.RFC3339Nano, gap[2])
	if !to.Equal(taken.UTC()) || !from.Equal(taken.Add(-6*time.Second).UTC()) {
		t.Errorf("gap %v–%v, want the lease duration before the takeover at %v", from, to, taken)
	}
	// The overview has the hour's timeline too.
	if _, body, _ = s.get("/"); !strings.Contains(body, `id="timeline-hour"`) {
		t.Errorf("no timeline on the overview")
	}

	// A job's runs: 4 succeeded on node-a, 2 failed on node-b, 1 skipped.
	if _, _, err := s.sched.Create(ctx, sqlease.Job{Name: "etl", Schedule: sqlease.Schedule{Every: time.Hour}}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		s.addRun("etl", 100-i*10, "succeeded", "", "node-a")
	}
	s.addRun("etl", 50, "failed", "boom", "node-b")
	s.addRun("etl", 40, "failed", "boom", "node-b")
	s.addRun("etl", 30, "skipped", "breaker open", "node-b")
	_, body, _ = s.get("/ui/jobs/etl")
	runs := section(body, `<svg class="chart runs"`, "</svg>")
	counts := map[string]int{}
	for _, m := range regexp.MustCompile(`data-runs="([^"]*)"`).FindAllStringSubmatch(runs, -1) {
		for _, part := range strings.Split(m[1], ",") {
			n, o, _ := strings.Cut(part, " ")
			k, _ := strconv.Atoi(n)
			counts[o] += k
		}
	}
	if counts["succeeded"] != 4 || counts["failed"] != 2 || counts["skipped"] != 1 {
		t.Errorf("runs by outcome %v, want 4 succeeded, 2 failed, 1 skipped:\n%s", counts, runs)
	}
	if !strings.Contains(runs, "The newest 7 runs: 4 succeeded, 2 failed, 1 skipped.") {
		t.Errorf("the runs picture's text alternative:\n%s", runs)
	}
	durations := section(body, `<svg class="chart durations"`, "</svg>")
	if n := strings.Count(durations, "<circle "); n != 6 {
		t.Errorf("%d dots, want one per finished run (6):\n%s", n, durations)
	}
	if !strings.Contains(durations, `data-ms="250"`) || !strings.Contains(durations, "median 250 ms") {
		t.Errorf("the durations (250 ms each) are not drawn as such:\n%s", durations)
	}
	perNode := section(body, `<svg class="chart bars" id="runs-per-node"`, "</svg>")
	if !strings.Contains(perNode, `data-label="node-a" data-count="4"`) || !strings.Contains(perNode, `data-label="node-b" data-count="2"`) {
		t.Errorf("runs per node, want node-a 4 and node-b 2 (the skipped one ran nowhere):\n%s", perNode)
	}
}
