package cli_test

import (
	"context"
	"testing"
	"time"
)

// Intervals that would spin a core are refused with exit 2 (issue 30 item
// 25: --renew-interval 1ns and --poll-interval 1ns were accepted).
func TestIntervalMinimums(t *testing.T) {
	db, _ := sqliteURL(t)
	for flag, field := range map[string]string{
		"--renew-interval":            "renew_interval",
		"--acquire-interval":          "acquire_interval",
		"--poll-interval":             "poll_interval",
		"--schedule-refresh-interval": "schedule_refresh_interval",
	} {
		run(t, nil, "", "serve", "--db", db, "--http", "127.0.0.1:0", flag, "1ns").usage(t, field, "at least 10ms")
	}
}

// A config file that is not a regular file of bounded size is refused at
// once (issue 30 item 24: --config /dev/zero read without bound and ignored
// SIGTERM meanwhile).
func TestConfigFileBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	began := time.Now()
	r := runCtx(t, ctx, nil, "", "serve", "--config", "/dev/zero", "--http", "127.0.0.1:0")
	r.usage(t, "config", "/dev/zero", "regular file")
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("took %s", d)
	}
}
