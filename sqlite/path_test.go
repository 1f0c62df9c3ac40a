package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sqlease/sqlease/sqlite"
)

// A database path is a file name, never URI syntax: names with %, #, ? and
// & open exactly that file, and cannot add pragmas or drop the store's own
// (issue 11: "a%20b.db" opened "a b.db", "c#d.db" opened "c", "?…&x=" injected
// pragmas and dropped the busy timeout).
func TestPathIsAFileName(t *testing.T) {
	for _, name := range []string{"a%20b.db", "c#d.db", "x?mode=ro&_pragma=busy_timeout(1).db", "sp ace&amp.db", "ünï.db"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, name)
			s, err := sqlite.OpenStore(context.Background(), path, "sqlease")
			if err != nil {
				t.Fatal(err)
			}
			defer s.DB().Close()
			var busy int
			if err := s.DB().QueryRow(`PRAGMA busy_timeout`).Scan(&busy); err != nil || busy != int(sqlite.DefaultBusyTimeout.Milliseconds()) {
				t.Fatalf("busy_timeout %d (%v), want %d", busy, err, sqlite.DefaultBusyTimeout.Milliseconds())
			}
			if _, err := os.Stat(path); err != nil {
				entries, _ := os.ReadDir(dir)
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Fatalf("%q was not created (the directory holds %q)", name, names)
			}
		})
	}
}
