package action

import (
	"bytes"
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/sqlease/sqlease/scheduler"
)

// Redaction is what replaces a secret in a run's kept output and in its
// error.
const Redaction = "[redacted]"

// capture keeps the tail of an action's output for its run, with the
// action's secrets redacted. Secrets are redacted when the tail is taken,
// over the last limit + (longest secret - 1) bytes: an occurrence of a
// secret that overlaps the kept tail lies whole in that buffer, however the
// writes split it, and a fragment of one cut at the buffer's start lies
// before the kept tail.
type capture struct {
	mu      sync.Mutex
	limit   int
	keep    int // limit + longest form of a secret - 1 (at most)
	buf     []byte
	total   int64
	secrets *secretSet
}

// newCapture keeps the last limit bytes (0: none, writes are discarded).
func newCapture(limit int, secrets *secretSet) *capture {
	c := &capture{limit: max(limit, 0), secrets: secrets}
	c.keep = c.limit
	if c.limit > 0 && secrets.maxForm() > 0 {
		c.keep += secrets.maxForm() - 1
	}
	return c
}

// secretSet is the secrets of one action's run, as given: the forms an
// echo may take them in (secretList) are computed only for a text long
// enough to hold one. Every form of a secret is at least as long as the
// secret (an escape or base64 never shortens), so a text shorter than a
// secret cannot show it in any form — a run's kept output is most often
// a status line, shorter than its run token, whose forms were 6 % of the
// daemon's CPU per delivery (sqlease-bench -bench daemon, profiled).
type secretSet struct {
	raw []string // non-empty, shortest first

	mu   sync.Mutex // a command's two captures share a set
	list []string   // the forms of raw[:listOf], once asked
	// listOf is how many of raw list holds (-1: not computed).
	listOf int
}

// newSecretSet returns the set of the non-empty secrets given.
func newSecretSet(secrets ...string) *secretSet {
	s := &secretSet{listOf: -1}
	for _, v := range secrets {
		if v != "" {
			s.raw = append(s.raw, v)
		}
	}
	slices.SortFunc(s.raw, func(a, b string) int { return len(a) - len(b) })
	return s
}

// maxForm bounds the length of every form of every secret: 6 bytes for
// each of the longest one's (a byte JSON-escaped as \u00XX; percent
// escapes take 3, base64 less than 2).
func (s *secretSet) maxForm() int {
	if s == nil || len(s.raw) == 0 {
		return 0
	}
	return 6 * len(s.raw[len(s.raw)-1])
}

// listFor returns the forms, longest first, of the secrets a text of n
// bytes could hold: those not longer than n.
func (s *secretSet) listFor(n int) []string {
	if s == nil {
		return nil
	}
	k := sort.Search(len(s.raw), func(i int) bool { return len(s.raw[i]) > n })
	s.mu.Lock()
	defer s.mu.Unlock()
	if k != s.listOf {
		s.list, s.listOf = secretList(s.raw[:k]...), k
	}
	return s.list
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(len(p))
	if c.keep == 0 {
		return len(p), nil
	}
	if len(p) >= c.keep {
		c.buf = append(c.buf[:0], p[len(p)-c.keep:]...)
		return len(p), nil
	}
	c.buf = append(c.buf, p...)
	// Shift only once the buffer holds twice what it keeps: amortised,
	// each byte is copied at most twice.
	if len(c.buf) >= 2*c.keep {
		c.buf = append(c.buf[:0], c.buf[len(c.buf)-c.keep:]...)
	}
	return len(p), nil
}

// tail returns the kept tail, redacted and valid UTF-8, and how many bytes
// of the output before it were left out.
func (c *capture) tail() (string, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.buf
	if len(b) > c.keep {
		b = b[len(b)-c.keep:]
	}
	spans := findSecrets(b, c.secrets.listFor(len(b)))
	start := max(len(b)-c.limit, 0)
	for _, s := range spans {
		if s[0] < start && start < s[1] {
			start = s[1] // a secret across the cut is dropped whole
		}
	}
	if start > 0 || c.total > int64(len(b)) {
		// The tail starts after a cut: on a character boundary.
		for i := 0; i < utf8.UTFMax-1 && start < len(b) && !utf8.RuneStart(b[start]); i++ {
			start++
		}
	}
	var out strings.Builder
	at := start
	for _, s := range spans {
		if s[1] <= at {
			continue
		}
		if s[0] > at {
			out.Write(b[at:s[0]])
		}
		out.WriteString(Redaction)
		at = s[1]
	}
	out.Write(b[at:])
	dropped := c.total - int64(len(b)) + int64(start)
	return strings.ToValidUTF8(out.String(), "\uFFFD"), dropped
}

// findSecrets returns the spans [start, end) of the secrets in b, in order
// and not overlapping: at each position the longest secret that matches.
func findSecrets(b []byte, secrets []string) [][2]int {
	var spans [][2]int
	if len(secrets) == 0 {
		return nil
	}
	// A secret's forms multiply the list: test them only where one starts.
	var first [256]bool
	for _, s := range secrets {
		first[s[0]] = true
	}
	for i := 0; i < len(b); {
		if !first[b[i]] {
			i++
			continue
		}
		matched := false
		for _, s := range secrets { // longest first
			if bytes.HasPrefix(b[i:], []byte(s)) {
				spans = append(spans, [2]int{i, i + len(s)})
				i += len(s)
				matched = true
				break
			}
		}
		if !matched {
			i++
		}
	}
	return spans
}

// redactHead returns the first n bytes of b with the secrets redacted, as
// valid UTF-8. b holds more than n bytes where it can (the longest secret's
// worth), so that a secret across byte n is found whole, and replaced; a
// fragment of one cut at b's end lies beyond n and is left out.
func redactHead(b []byte, n int, secrets []string) string {
	var out strings.Builder
	at := 0
	for _, s := range findSecrets(b, secrets) {
		if s[0] >= n {
			break
		}
		out.Write(b[at:s[0]])
		out.WriteString(Redaction)
		at = s[1]
	}
	if at < n {
		out.Write(b[at:min(n, len(b))])
	}
	return strings.ToValidUTF8(out.String(), "\uFFFD")
}

// keepFor hands the capture's tail to the run (scheduler.SetOutputTail); no
// output is kept when nothing was written.
func (c *capture) keepFor(ctx context.Context) {
	if c.total == 0 {
		return
	}
	tail, dropped := c.tail()
	scheduler.SetOutputTail(ctx, tail, dropped)
}

// lastLine returns the last non-empty line of the capture's tail, redacted,
// at most max bytes of its end, marked "…" where cut: the detail of a
// one-line error.
func (c *capture) lastLine(max int) string {
	t, dropped := c.tail()
	t = strings.TrimRight(t, " \t\r\n")
	i := strings.LastIndexAny(t, "\r\n")
	line := strings.TrimSpace(t[i+1:])
	cut := i < 0 && dropped > 0
	if len(line) > max {
		line, cut = line[len(line)-max:], true
		for line != "" && !utf8.RuneStart(line[0]) {
			line = line[1:]
		}
	}
	if cut && line != "" {
		line = "…" + line
	}
	return line
}

// firstLine returns the first line of s, at most max bytes, marked "…"
// where cut.
func firstLine(s string, max int) string {
	s = strings.TrimSpace(s)
	line, _, more := strings.Cut(s, "\n")
	line = strings.TrimSpace(line)
	cut := more
	if len(line) > max {
		line, cut = line[:max], true
		for line != "" && !utf8.ValidString(line) {
			line = line[:len(line)-1]
		}
	}
	if cut && line != "" {
		line += "…"
	}
	return line
}
