package action

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
)

// httpMethods are the methods an HTTP action may use.
var httpMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// httpTransport sends every HTTP action: its own connection pool, no
// redirects (a webhook that moved is a configuration error, and following a
// 302 would turn a POST into a GET), no cookies. Requests go to it
// directly, not through an http.Client: a client that follows no redirect
// and keeps no cookie adds to a request only a copy of its headers (for
// redirects) and the Basic credentials of its URL, which send sets itself
// — the copy and the client's wrapping were 4 % of the daemon's CPU per
// delivery (sqlease-bench -bench daemon, profiled).
var httpTransport = gatedTransport()

// send sends req as an http.Client that follows no redirects would: a URL
// with user information and no Authorization header sends it as Basic
// credentials; a 3xx response is returned as any other.
func send(req *http.Request) (*http.Response, error) {
	if u := req.URL.User; u != nil && req.Header.Get("Authorization") == "" {
		p, _ := u.Password()
		req.SetBasicAuth(u.Username(), p)
	}
	resp, err := httpTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.Body == nil {
		resp.Body = http.NoBody
	}
	return resp, nil
}

// maxDrain is how much of a response body is read to reuse its connection.
const maxDrain = 64 << 10

func (h *HTTP) method() string {
	if h.Method == "" {
		return DefaultMethod
	}
	return strings.ToUpper(h.Method)
}

func (h *HTTP) validate() error {
	u, err := url.Parse(h.URL)
	switch {
	case h.URL == "":
		return invalid("action.http.url", "is required")
	case err != nil:
		return invalid("action.http.url", "must be an absolute http or https URL, got %q", h.URL)
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return invalid("action.http.url", "must be an absolute http or https URL, got %q", h.URL)
	}
	if !httpMethods[h.method()] {
		return invalid("action.http.method", "must be GET, HEAD, POST, PUT, PATCH, DELETE or OPTIONS, got %q", h.Method)
	}
	for name := range h.SecretHeaders {
		if !isToken(name) {
			return invalid("action.http.headers", "has an invalid header name %q", name)
		}
	}
	for name, value := range h.Headers {
		switch {
		case !isToken(name):
			return invalid("action.http.headers", "has an invalid header name %q", name)
		case strings.ContainsAny(value, "\r\n\x00"):
			return invalid("action.http.headers", "value of %q must not contain CR, LF or NUL", name)
		}
	}
	return validateTimeout("action.http.timeout", h.Timeout)
}

// httpPrep is what every run of one HTTP action shares, built once when
// the action is parsed (parsePrepared): the request without its context,
// headers or body (its URL parsed once: parsing it for every delivery, in
// http.NewRequestWithContext and again for its password, was two of each
// run's allocations), the action's own headers under their canonical
// names, and the secrets its URL and headers carry. It is never written
// after prepare: runs share it, and share its URL read-only (a
// RoundTripper does not modify its request).
type httpPrep struct {
	tmpl    *http.Request // method, URL and Host (a Host header wins)
	headers []headerValue // the action's headers, less Host and the reserved ones
	secrets []string      // the URL's password, the values of secret-named headers
	getBody func() (io.ReadCloser, error)
}

type headerValue struct{ key, value string }

// prepare builds h's httpPrep; h is valid.
func (h *HTTP) prepare() (*httpPrep, error) {
	tmpl, err := http.NewRequest(h.method(), h.URL, nil)
	if err != nil {
		return nil, err
	}
	p := &httpPrep{tmpl: tmpl, secrets: urlPasswords(h.URL)}
	for name, value := range h.Headers {
		if SecretHeader(name) {
			p.secrets = append(p.secrets, credentialParts(value)...)
		}
		if reservedHeader(name) {
			continue // the run's values always win
		}
		key := http.CanonicalHeaderKey(name)
		if key == "Host" {
			tmpl.Host = value
			continue
		}
		p.headers = append(p.headers, headerValue{key, value})
	}
	if h.Body != "" {
		// As http.NewRequestWithContext sets it for a *strings.Reader: a
		// fresh reader of the body, for a request the transport sends again
		// on a new connection.
		body := h.Body
		p.getBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(body)), nil }
	}
	return p, nil
}

func (h *HTTP) run(ctx context.Context, run sqlease.Run) error {
	return h.runPrepared(ctx, run, nil)
}

// runPrepared sends h for run; p is h's httpPrep, or nil to prepare it now.
func (h *HTTP) runPrepared(ctx context.Context, run sqlease.Run, p *httpPrep) error {
	if p == nil {
		var err error
		if p, err = h.prepare(); err != nil {
			return fmt.Errorf("http action: %w", err)
		}
	}
	actx, cancel, timedOut := withTimeout(ctx, h.Timeout)
	defer cancel()
	method := p.tmpl.Method
	req := p.tmpl.WithContext(withGate(actx, ctx))
	if p.getBody != nil {
		req.Body, _ = p.getBody()
		req.GetBody = p.getBody
		req.ContentLength = int64(len(h.Body))
	}
	// The run's values, under their canonical names, after the action's
	// own headers, share one array.
	values := append(runValues(run), callbackValues(ctx, run)...)
	req.Header = make(http.Header, len(p.headers)+len(h.SecretHeaders)+len(values)+3) // grown once
	one := make([]string, len(p.headers)+len(values))
	for i, hv := range p.headers {
		one[i] = hv.value
		req.Header[hv.key] = one[i : i+1 : i+1]
	}
	// What the run's output and error must not show: credentials in the
	// URL and in headers, the secrets the node resolved.
	// (net/http derives "Authorization: Basic …" from the URL's password.)
	secrets := append(append(nodeSecrets(), p.secrets...), runSecrets(ctx)...)
	for name, ref := range h.SecretHeaders {
		if reservedHeader(name) {
			continue
		}
		v, err := ref.resolve()
		if err != nil {
			return fmt.Errorf("http action not sent: header %s: %w", name, err)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return fmt.Errorf("http action not sent: header %s: the secret contains CR, LF or NUL", name)
		}
		secrets = append(secrets, credentialParts(v)...)
		req.Header.Set(name, v)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header["User-Agent"] = []string{"sqlease"}
	}
	one = one[len(p.headers):]
	for i, v := range values {
		if v.header == "Sqlease-Checkpoint" && len(v.value) > MaxCheckpointHeaderBytes && runAccessOf(ctx).Token != "" {
			v.header, v.value = "Sqlease-Checkpoint-Size", strconv.Itoa(len(v.value))
		}
		one[i] = v.value
		req.Header[v.header] = one[i : i+1 : i+1]
	}

	// The just-in-time check before the external send (seed 001): a run
	// whose lease or lock is gone does not send.
	if err := scheduler.Ensure(ctx); err != nil {
		return fmt.Errorf("http action not sent: %w", err)
	}
	if err := checkRequestURL(req.URL); err != nil {
		return fmt.Errorf("http action not sent: %w", err)
	}
	resp, err := send(req)
	if err != nil {
		var destErr *DestinationError
		switch {
		case errors.As(err, &destErr):
			return fmt.Errorf("http action not sent: %w", destErr)
		case errors.Is(err, errGateClosed):
			var uerr *url.Error
			if errors.As(err, &uerr) {
				err = uerr.Err // it repeats the URL
			}
			return fmt.Errorf("http action not sent: %w", err)
		case timedOut():
			return &failure{fmt.Sprintf("http action: %s: timed out after %s (no response)", method, timeoutOrDefault(h.Timeout)), ErrTimeout}
		case ctx.Err() != nil:
			return stopped("http", ctx)
		}
		// A *url.Error repeats the URL, which may carry credentials.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return fmt.Errorf("http action: %s: %w", method, err)
	}
	defer resp.Body.Close()
	set := newSecretSet(secrets...)
	limit := scheduler.OutputLimit(ctx)
	out := newCapture(limit, set)
	// The output is the status line and the body's tail; the error's
	// detail is the body's first line (read with room for a secret across
	// its end, redacted before it is cut).
	var line [64]byte // on the stack: fmt.Fprintf boxed both strings
	_, _ = out.Write(append(append(append(append(line[:0], resp.Proto...), ' '), resp.Status...), '\n'))
	var head bytes.Buffer
	headMax := MaxErrorOutput + 1 + set.maxForm()
	read := int64(maxDrain)
	if limit > 0 {
		read = maxBodyRead
	}
	buf := copyBufs.Get().(*[]byte)
	_, err = io.CopyBuffer(io.MultiWriter(out, &limitWriter{w: &head, n: headMax}), io.LimitReader(resp.Body, read), *buf)
	copyBufs.Put(buf)
	out.keepFor(ctx)
	if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
		return nil
	}
	msg := fmt.Sprintf("http action: %s: HTTP status %s", method, resp.Status)
	if text := firstLine(redactHead(head.Bytes(), MaxErrorOutput+1, set.listFor(head.Len())), MaxErrorOutput); text != "" {
		msg += ": " + text
	}
	return &failure{msg, err}
}

// copyBufs are the response bodies' copy buffers: io.Copy would allocate
// 32 KiB per run, which was two thirds of the daemon's allocation and most
// of its GC work when delivering thousands of runs a second.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// maxBodyRead is how much of a response body is read for the run's
// output, which keeps its tail: a larger body is cut off there.
const maxBodyRead = 16 << 20

// limitWriter keeps the first n bytes written to it and discards the rest.
type limitWriter struct {
	w io.Writer
	n int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(len(p), l.n)
		_, _ = l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// reservedHeader reports whether name is one of the headers that carry the
// run's identity.
func reservedHeader(name string) bool {
	c := http.CanonicalHeaderKey(name)
	return c == "Idempotency-Key" || strings.HasPrefix(c, "Sqlease-")
}

// isToken reports whether s is a valid HTTP header name (RFC 9110 token).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("!#$%&'*+-.^_`|~", r):
		default:
			return false
		}
	}
	return true
}
