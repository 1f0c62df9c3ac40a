package httpapi

import (
	"strings"
	"testing"
)

// A page reads from the database about what it sends, not its whole limit
// of rows: with 64 KiB items and limit 1000, fill asks for a few dozen rows
// (issue 30, item 1: don't fetch 1,000 × 64 KiB outputs to drop them).
func TestFillReadsNearTheBudget(t *testing.T) {
	item := strings.Repeat("o", 64<<10)
	for _, tc := range []struct {
		size, rows, limit int
	}{{64 << 10, 5000, 1000}, {100, 5000, 1000}, {64 << 10, 3, 1000}, {2 << 20, 10, 1000}, {10, 100, 100}} {
		p := newPage(tc.limit)
		read, kept := 0, 0
		more, err := fill(p, func(n int) ([]string, error) {
			n = min(n, tc.rows-read)
			read += n
			out := make([]string, n)
			for i := range out {
				out[i] = item[:min(tc.size, len(item))] + strings.Repeat("x", max(0, tc.size-len(item)))
			}
			return out, nil
		}, func(s string) bool {
			if !p.fit(s) {
				return false
			}
			kept++
			return true
		})
		if err != nil {
			t.Fatal(err)
		}
		if want := min(tc.rows, tc.limit, max(1, MaxPageBytes/(tc.size+3))); kept != want && kept != want+1 {
			t.Errorf("%+v: kept %d, want about %d", tc, kept, want)
		}
		if more != (kept < tc.rows) {
			t.Errorf("%+v: more %v with %d of %d kept", tc, more, kept, tc.rows)
		}
		if read > kept+firstRead+1 {
			t.Errorf("%+v: read %d rows to keep %d", tc, read, kept)
		}
	}
}
