package model

import (
	"bufio"
	"os"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sqlease/sqlease/election"
	"github.com/sqlease/sqlease/sqlstore"
)

// tick is the model's time unit: one tick of its clock is one second.
const tick = time.Second

var reDefine = regexp.MustCompile(`^#define\s+(\w+)\s+(\d+)\b`)

// defines returns the integer #defines of lease.pml.
func defines(t *testing.T) map[string]int {
	t.Helper()
	f, err := os.Open("lease.pml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	defs := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := reDefine.FindStringSubmatch(sc.Text()); m != nil {
			n, _ := strconv.Atoi(m[2])
			if _, dup := defs[m[1]]; !dup { // the first is the default
				defs[m[1]] = n
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return defs
}

// TestConstantsMatchDefaults fails when the election package's defaults
// change and the model's constants do not follow.
func TestConstantsMatchDefaults(t *testing.T) {
	// New applies the defaults; the store is never called (a typed nil
	// only satisfies Validate's "store is required").
	e, err := election.New(election.Config{Store: (*sqlstore.Store)(nil)})
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.Config()
	defs := defines(t)
	for _, c := range []struct {
		name string
		code time.Duration
	}{
		{"LEASE", cfg.LeaseDuration},
		{"RENEW", cfg.RenewInterval},
		{"ACQUIRE", cfg.AcquireInterval},
		{"MARGIN", cfg.SafetyMargin},
	} {
		n, ok := defs[c.name]
		if !ok {
			t.Errorf("lease.pml defines no %s", c.name)
			continue
		}
		if got := time.Duration(n) * tick; got != c.code {
			t.Errorf("lease.pml: %s = %d ticks = %s, the code's default is %s: update the model (and README.md)", c.name, n, got, c.code)
		}
	}
	// The defaults this test reads must be the documented constants, not
	// values that merely happen to agree.
	if cfg.LeaseDuration != election.DefaultLeaseDuration || cfg.RenewInterval != election.DefaultRenewInterval ||
		cfg.AcquireInterval != election.DefaultAcquireInterval {
		t.Errorf("Config defaults %s/%s/%s differ from the Default constants", cfg.LeaseDuration, cfg.RenewInterval, cfg.AcquireInterval)
	}
}
