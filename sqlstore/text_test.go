package sqlstore_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/sqlease/sqlease/sqlstore"
)

func TestCleanText(t *testing.T) {
	for _, s := range []string{"", "boom", "ошибка: exit status 1", strings.Repeat("x", sqlstore.MaxTextBytes)} {
		if got := sqlstore.CleanText(s); got != s {
			t.Errorf("CleanText(%q) = %q, want it unchanged", s, got)
		}
	}
	if got := sqlstore.CleanText("a\x00b\xffc"); got != "a\uFFFDb\uFFFDc" {
		t.Errorf("CleanText of a NUL and a stray byte = %q", got)
	}
	long := strings.Repeat("é", sqlstore.MaxTextBytes) // 2 bytes each
	got := sqlstore.CleanText(long)
	kept, marked := strings.CutSuffix(got, " …[truncated]")
	if !marked || len(got) > sqlstore.MaxTextBytes || !utf8.ValidString(got) || !strings.HasPrefix(long, kept) {
		t.Errorf("CleanText of %d bytes = %d bytes, marked %v, valid %v", len(long), len(got), marked, utf8.ValidString(got))
	}
	// Around the bound, with NULs that grow into 3-byte replacements.
	for n := sqlstore.MaxTextBytes - 4; n <= sqlstore.MaxTextBytes+4; n++ {
		got := sqlstore.CleanText(strings.Repeat("x", n-2) + "\x00\x00")
		if len(got) > sqlstore.MaxTextBytes || !utf8.ValidString(got) || strings.IndexByte(got, 0) >= 0 {
			t.Errorf("CleanText of %d bytes ending in NULs = %d bytes", n, len(got))
		}
	}
}
