package dashboard

import (
	"strconv"
	"unicode/utf8"
)

// Markup per row, bytes, charged besides its data: measured on the
// templates (a jobs row renders about 560 bytes of markup, a run row 900)
// and rounded up.
const (
	rowMarkup = 1024
	// stateShown is how much of a singleton's state a page shows.
	stateShown = 512
	// actionShown is how much of a job's action the job page shows.
	actionShown = 64 << 10
)

// budget counts the bytes a page renders, to stop it at Config.PageBudget.
type budget struct{ left int }

// take charges n bytes and reports whether they fit; when they do not,
// nothing is charged.
func (b *budget) take(n int) bool {
	if n > b.left {
		return false
	}
	b.left -= n
	return true
}

// escaped is how many bytes s takes once escaped by html/template in text
// or an attribute (at most 5 per byte: "&#34;"), or in a URL path (3).
func escaped(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '<' || c == '>':
			n += 4
		case c == '&' || c == '"' || c == '\'' || c == '+' || c == 0:
			n += 5
		case c < 0x20 || c >= 0x7f || c == ' ' || c == '%' || c == '?' || c == '#' || c == '/':
			n += 3
		default:
			n++
		}
	}
	return n
}

// escapedAll sums escaped over strings.
func escapedAll(ss ...string) int {
	n := 0
	for _, s := range ss {
		n += escaped(s)
	}
	return n
}

// cutTail returns the end of s that escapes to at most n bytes, on a rune
// boundary (a run's kept output is its tail: the end is what was asked
// for).
func cutTail(s string, n int) string {
	i := len(s)
	for i > 0 && n > 0 {
		_, size := utf8.DecodeLastRuneInString(s[:i])
		c := escaped(s[i-size : i])
		if c > n {
			break
		}
		n -= c
		i -= size
	}
	return s[i:]
}

// cutHead returns the start of s that escapes to at most n bytes, on a
// rune boundary.
func cutHead(s string, n int) string {
	i := 0
	for i < len(s) && n > 0 {
		_, size := utf8.DecodeRuneInString(s[i:])
		c := escaped(s[i : i+size])
		if c > n {
			break
		}
		n -= c
		i += size
	}
	return s[:i]
}

// size writes a byte count for people: 812 B, 4.0 KiB, 1.2 MiB.
func size(n int) string {
	switch {
	case n < 1<<10:
		return strconv.Itoa(n) + " B"
	case n < 1<<20:
		return strconv.FormatFloat(float64(n)/(1<<10), 'f', 1, 64) + " KiB"
	}
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
}
