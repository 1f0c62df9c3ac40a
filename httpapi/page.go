package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// MaxPageBytes bounds one page of every listing (jobs, runs, singletons,
// leadership history): a page ends at its limit of rows or where its items'
// JSON would pass this many bytes, whichever comes first, and then carries
// next. Every byte of an item counts — output, error, action, schedule,
// key, env, state — as the response encodes it: a runs page of 1,000 runs
// with 64 KiB of output each was 65.8 MB, and 32 such requests took a node
// to 8.4 GiB (issue 30). One item larger than the budget still makes a
// page of its own, so a client always gets on.
const MaxPageBytes = 1 << 20

// firstRead is how many rows a listing reads first; later reads are sized
// by the average item so far (page.want), so that the rows read from the
// database stay near the page's byte budget too instead of being read by
// the thousand and dropped.
const firstRead = 16

// page is one page of a listing being built: every listing fills its
// items through fit (and its reads through fill), so none can forget the
// byte budget.
type page struct {
	limit, budget int
	rows, bytes   int
	buf           bytes.Buffer
	enc           *json.Encoder
}

func newPage(limit int) *page {
	p := &page{limit: limit, budget: MaxPageBytes}
	p.enc = json.NewEncoder(&p.buf)
	p.enc.SetEscapeHTML(false) // as writeJSON encodes
	return p
}

// fit reports whether v, an item as the response encodes it, still fits
// the page, and counts it when it does. The first item always fits. After
// fit said no the page is full: the caller stops, and next is the cursor of
// the last item that fit.
func (p *page) fit(v any) bool {
	if p.rows >= p.limit {
		return false
	}
	p.buf.Reset()
	n := p.budget // an item that cannot be encoded is answered by writeJSON
	if err := p.enc.Encode(v); err == nil {
		n = p.buf.Len() // the newline stands for the comma between items
	}
	if p.rows > 0 && p.bytes+n > p.budget {
		return false
	}
	p.rows++
	p.bytes += n
	return true
}

// want is how many rows to read next: what the page may still hold plus
// the one row that tells whether another page follows, at most what the
// bytes left hold at the average item size so far.
func (p *page) want() int {
	n := p.limit + 1 - p.rows
	if p.rows == 0 {
		return min(n, firstRead)
	}
	avg := max(p.bytes/p.rows, 1)
	return max(1, min(n, (p.budget-p.bytes)/avg+1))
}

// fill builds the page: it reads up to p.want() rows at a time with read
// (which continues where its previous call ended) and hands each to add
// (which calls fit, keeps the item and remembers its cursor), until add
// refuses a row — the page is full and more reports that a next page
// exists — or read returns fewer rows than asked: the listing's end.
func fill[R any](p *page, read func(n int) ([]R, error), add func(R) bool) (more bool, err error) {
	for {
		n := p.want()
		rows, err := read(n)
		if err != nil {
			return false, err
		}
		for _, r := range rows {
			if !add(r) {
				return true, nil
			}
		}
		if len(rows) < n {
			return false, nil
		}
	}
}

// writePage answers a listing once fill built its page into out (a pointer
// to the list, whose cursor is *next): err through fail, else the page, its
// next cleared where no page follows.
func (a *api) writePage(w http.ResponseWriter, r *http.Request, out any, next *string, more bool, err error, fail func(http.ResponseWriter, *http.Request, error)) {
	if err != nil {
		fail(w, r, err)
		return
	}
	if !more {
		*next = ""
	}
	a.writeJSON(w, r, http.StatusOK, out)
}
