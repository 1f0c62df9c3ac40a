package cli

import (
	"github.com/prometheus/client_golang/prometheus"

	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/action"
	"github.com/sqlease/sqlease/dashboard"
	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/singleton"
	"github.com/sqlease/sqlease/sqlstore"
)

// singletonAdmin is the daemon singletons' definitions and fleet status, on
// the database alone: the HTTP API and `sqlease singletons` share it.
type singletonAdmin struct {
	store  *sqlstore.Store
	leases sqlease.LeaseStore
}

// view builds the API's form of a daemon singleton from its row.
func (s singletonAdmin) view(ctx context.Context, row sqlstore.SingletonRow) (httpapi.Singleton, error) {
	spec, err := action.ParseProcessSpec(row.Spec)
	if err != nil {
		return httpapi.Singleton{}, fmt.Errorf("singleton %q: stored definition: %w", row.Name, err)
	}
	// Placement by node: the singleton runs where it is assigned, under
	// its assignment's generation, while that node's member lease lives.
	var member sqlease.Lease
	if row.Node != "" {
		var err error
		member, err = s.leases.Lease(ctx, singleton.MemberPrefix+row.Node)
		if err != nil && !errors.Is(err, sqlease.ErrNoLease) {
			return httpapi.Singleton{}, err
		}
	}
	state := json.RawMessage(row.State)
	if state == nil {
		state = spec.InitialState
	}
	shown := action.RedactProcess(spec)
	out := httpapi.Singleton{Name: row.Name, Command: shown.Command, Env: shown.Env,
		Heartbeat: spec.Heartbeat.String(), StopTimeout: spec.StopTimeout.String(),
		Status: singleton.FleetStatus(row, member, time.Duration(spec.Heartbeat)), State: state,
		StateSavedAt: stamp(row.StateSavedAt), HeartbeatAt: stamp(row.HeartbeatAt), StartedAt: stamp(row.StartedAt),
		Restarts: row.Restarts, LastError: row.LastError, LastErrorAt: stamp(row.LastErrorAt)}
	if out.Status != singleton.StatusUnplaced && out.Status != singleton.StatusPaused {
		out.Holder, out.Epoch = row.Node, row.Generation
	}
	return out, nil
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// daemonRow reads a daemon singleton's row: ErrNoJob for none or for a
// library singleton.
func (s singletonAdmin) daemonRow(ctx context.Context, name string) (sqlstore.SingletonRow, error) {
	row, err := s.store.Singleton(ctx, name)
	if err != nil {
		return row, err
	}
	if row.Spec == nil {
		return row, fmt.Errorf("singleton %q is a library singleton: %w", name, sqlease.ErrNoJob)
	}
	return row, nil
}

func (s singletonAdmin) Create(ctx context.Context, raw []byte) (httpapi.Singleton, bool, error) {
	if len(raw) > httpapi.MaxSingletonBytes {
		return httpapi.Singleton{}, false, fmt.Errorf("%w: body: must be at most %d bytes, got %d", sqlease.ErrInvalidConfig, httpapi.MaxSingletonBytes, len(raw))
	}
	spec, err := action.ParseProcessSpec(raw)
	if err != nil {
		return httpapi.Singleton{}, false, err
	}
	canon, err := json.Marshal(spec)
	if err != nil {
		return httpapi.Singleton{}, false, err
	}
	sum := sha256.Sum256(canon)
	hash := hex.EncodeToString(sum[:])
	row, created, err := s.store.CreateSingleton(ctx, spec.Name, canon, hash)
	if err != nil {
		return httpapi.Singleton{}, false, err
	}
	if !created && row.SpecHash != hash {
		return httpapi.Singleton{}, false, fmt.Errorf("%w: name: a singleton named %q exists with a different definition", sqlease.ErrConflict, spec.Name)
	}
	out, err := s.view(ctx, row)
	return out, created, err
}

// List returns every daemon singleton, read a page at a time (the
// dashboard's overview and `sqlease status`; the HTTP API pages with Page).
func (s singletonAdmin) List(ctx context.Context) ([]httpapi.Singleton, error) {
	var out []httpapi.Singleton
	for after := ""; ; {
		page, err := s.Page(ctx, after, listPage)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < listPage {
			return out, nil
		}
		after = page[len(page)-1].Name
	}
}

// listPage is how many singletons List reads at a time.
const listPage = 100

// Page returns up to limit daemon singletons whose names sort after
// `after`, by name.
func (s singletonAdmin) Page(ctx context.Context, after string, limit int) ([]httpapi.Singleton, error) {
	rows, err := s.store.DaemonSingletons(ctx, after, limit)
	if err != nil {
		return nil, err
	}
	out := make([]httpapi.Singleton, 0, len(rows))
	for _, row := range rows {
		v, err := s.view(ctx, row)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func (s singletonAdmin) Get(ctx context.Context, name string) (httpapi.Singleton, error) {
	row, err := s.daemonRow(ctx, name)
	if err != nil {
		return httpapi.Singleton{}, err
	}
	return s.view(ctx, row)
}

func (s singletonAdmin) SetPaused(ctx context.Context, name string, paused bool) (httpapi.Singleton, error) {
	if err := s.store.SetSingletonPaused(ctx, name, paused); err != nil {
		return httpapi.Singleton{}, err
	}
	return s.Get(ctx, name)
}

func (s singletonAdmin) Delete(ctx context.Context, name string) error {
	return s.store.DeleteSingleton(ctx, name)
}

// singletonHost runs the daemon singletons on a node: it follows the
// table (every second), supervises the process of each singleton this node
// holds, and serves the processes' state and heartbeat calls.
type singletonHost struct {
	singletonAdmin
	node  *singleton.Node
	api   string        // this node's base URL, for SQLEASE_API
	every time.Duration // re-read interval without a change feed (syncInterval)
	log   *slog.Logger
	// exec is the node's policy on commands: a singleton's process is
	// one, so a node that refuses commands runs none (whoever wrote it).
	exec action.ExecPolicy

	kick chan struct{} // a write through this node: sync now

	mu         sync.Mutex
	registered map[string]string    // name -> spec hash it was registered with
	refused    map[string]bool      // names refused by the exec policy, logged once
	runs       runSecrets[*procRun] // name -> the run on this node
}

// The dashboard's singletons page pauses, resumes and deletes through
// the host, as the API does.
var _ dashboard.SingletonControl = (*singletonHost)(nil)

// procRun is a singleton process running on this node.
type procRun struct {
	epoch int64
	in    *singleton.Instance[json.RawMessage]
}

func newSingletonHost(admin singletonAdmin, node *singleton.Node, api string, lease time.Duration, log *slog.Logger) *singletonHost {
	return &singletonHost{singletonAdmin: admin, node: node, api: api, every: syncInterval(lease), log: log, kick: make(chan struct{}, 1),
		registered: map[string]string{}, refused: map[string]bool{}}
}

// syncEvery bounds how often a node re-reads the singletons table: a change
// made through another node (or the CLI) reaches it within that, one made
// through this node's API at once. The node re-reads every half lease
// (syncInterval), so that a node learns of a singleton before the lease of
// the node that created it, and runs it alone, can expire: its death then
// moves the singleton within the usual failover bound. With a change feed
// (PostgreSQL) every change arrives at once, and the re-reads are only a
// safety net: syncFed.
const (
	syncEvery = 5 * time.Second
	syncFed   = time.Minute
)

// syncInterval is the re-read interval for a node whose leases last lease.
func syncInterval(lease time.Duration) time.Duration {
	if lease <= 0 {
		return syncEvery
	}
	return max(min(lease/2, syncEvery), 100*time.Millisecond)
}

// run follows the table until ctx ends; changes, when not nil, signals
// that definitions changed.
func (h *singletonHost) run(ctx context.Context, changes <-chan struct{}) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.kick:
		case <-changes:
		}
		err := h.sync(ctx)
		if err != nil && ctx.Err() == nil {
			h.log.Warn("singleton_sync_failed", slog.String("error", err.Error()))
		}
		every := h.every
		if changes != nil && err == nil {
			every = syncFed
		}
		t.Reset(every)
	}
}

// changed makes run sync now (after a write through this node's API).
func (h *singletonHost) changed() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

func (h *singletonHost) Create(ctx context.Context, raw []byte) (httpapi.Singleton, bool, error) {
	defer h.changed()
	return h.singletonAdmin.Create(ctx, raw)
}

func (h *singletonHost) SetPaused(ctx context.Context, name string, paused bool) (httpapi.Singleton, error) {
	defer h.changed()
	return h.singletonAdmin.SetPaused(ctx, name, paused)
}

func (h *singletonHost) Delete(ctx context.Context, name string) error {
	defer h.changed()
	return h.singletonAdmin.Delete(ctx, name)
}

// sync registers the active daemon singletons with the node and
// unregisters the paused, deleted and changed ones.
func (h *singletonHost) sync(ctx context.Context) error {
	rows, err := h.store.Singletons(ctx)
	if err != nil {
		return err
	}
	want := map[string]sqlstore.SingletonRow{}
	for _, row := range rows {
		if row.Spec != nil && !row.Paused {
			want[row.Name] = row
		}
	}
	h.mu.Lock()
	var drop []string
	for name, hash := range h.registered {
		if row, ok := want[name]; !ok || row.SpecHash != hash {
			drop = append(drop, name)
		}
	}
	h.mu.Unlock()
	for _, name := range drop {
		h.node.Unregister(name) // stops its process
		h.mu.Lock()
		delete(h.registered, name)
		h.mu.Unlock()
	}
	for name, row := range want {
		h.mu.Lock()
		_, done := h.registered[name]
		h.mu.Unlock()
		if done {
			continue
		}
		if err := h.exec.Check("singleton " + name); err != nil {
			// Not registered: this node never holds it, so it stays with
			// (or moves to) a node that runs commands, or shows unplaced.
			if !h.refused[name] {
				h.refused[name] = true
				h.log.Warn("singleton_refused", slog.String("singleton", name), slog.String("error", err.Error()))
			}
			continue
		}
		spec, err := action.ParseProcessSpec(row.Spec)
		if err != nil {
			h.log.Warn("singleton_invalid", slog.String("singleton", name), slog.String("error", err.Error()))
			continue
		}
		if err := singleton.Register(h.node, singleton.Config[json.RawMessage]{Name: name, Initial: spec.InitialState,
			HeartbeatInterval: time.Duration(spec.Heartbeat), StopTimeout: time.Duration(spec.StopTimeout) + processReap,
			Body: h.body(spec)}); err != nil {
			return err
		}
		h.mu.Lock()
		h.registered[name] = row.SpecHash
		h.mu.Unlock()
	}
	return nil
}

// processReap is how long past its stop_timeout a stopped process's run
// may take to end: RunProcess kills it then, reaps it and reads the rest
// of its output (up to a second). Until then its node keeps the lease on a
// graceful stop; the process, killed, saves nothing more.
const processReap = 2 * time.Second

// body runs the singleton's process with its run's variables.
func (h *singletonHost) body(spec action.ProcessSpec) func(ctx context.Context, in *singleton.Instance[json.RawMessage]) error {
	return func(ctx context.Context, in *singleton.Instance[json.RawMessage]) error {
		token, release := h.runs.issue(spec.Name, &procRun{epoch: in.Token().Epoch, in: in})
		defer release()
		state := in.State()
		if len(state) == 0 {
			state = json.RawMessage("null")
		}
		tok := in.Token()
		env := []string{"SQLEASE_SINGLETON=" + spec.Name, "SQLEASE_EPOCH=" + strconv.FormatInt(tok.Epoch, 10),
			"SQLEASE_HOLDER=" + tok.Holder, "SQLEASE_STATE=" + string(state), "SQLEASE_API=" + h.api,
			"SQLEASE_SINGLETON_TOKEN=" + token}
		h.log.Info("singleton_process_started", slog.String("singleton", spec.Name), slog.Int64("lease_epoch", tok.Epoch))
		err := action.RunProcess(ctx, spec, action.ProcessOptions{Env: env, Until: in.ActDeadline, Logger: h.log})
		h.log.Info("singleton_process_exited", slog.String("singleton", spec.Name), slog.Int64("lease_epoch", tok.Epoch),
			slog.Any("error", err))
		if ctx.Err() != nil {
			return err // stopped: not an end of its own
		}
		return processEnd(spec.Name, err)
	}
}

// processEnd is why a process ended on its own, as last_error shows it:
// "exit status N" or "killed by signal NAME" and the last line it wrote
// (redacted by RunProcess), or why it could not start (`start "cmd":
// exec: … not found`), without the "singleton NAME: " every error of
// RunProcess begins with. A singleton's process is not meant to exit: an
// exit with status 0 is an end too.
func processEnd(name string, err error) error {
	var pe *action.ProcessError
	switch {
	case err == nil:
		return errors.New("exit status 0")
	case errors.As(err, &pe):
		msg := pe.Cause
		if pe.LastOutput != "" {
			msg += ": " + pe.LastOutput
		}
		return &endError{msg: msg, err: err}
	default:
		return &endError{msg: strings.TrimPrefix(err.Error(), "singleton "+name+": "), err: err}
	}
}

// endError is a process's end as processEnd words it, wrapping RunProcess's
// error.
type endError struct {
	msg string
	err error
}

func (e *endError) Error() string { return e.msg }
func (e *endError) Unwrap() error { return e.err }

// Authenticate checks a process call's secret against the run of name on
// this node, in constant time whether or not a run of that name is here
// (a missing run is compared with a secret nobody holds): one answer,
// httpapi.ErrUnauthorized, for every caller without the run's secret, so
// that no caller learns which singletons run where (issue 30, item 17).
func (h *singletonHost) Authenticate(name, secret string) error {
	_, err := h.runs.find(name, secret)
	return err
}

// current returns the run of name on this node for a process's call: the
// secret must be the run's (checked first: Authenticate), and only then
// does a stale epoch tell the process to exit (ErrConflict).
func (h *singletonHost) current(name string, epoch int64, secret string) (*procRun, error) {
	r, err := h.runs.find(name, secret)
	if err != nil {
		return nil, err
	}
	if r.epoch != epoch {
		return nil, fmt.Errorf("%w: singleton %q does not run under epoch %d on this node: the process must exit", sqlease.ErrConflict, name, epoch)
	}
	return r, nil
}

func (h *singletonHost) SaveState(ctx context.Context, name string, epoch int64, secret string, state []byte) error {
	r, err := h.current(name, epoch, secret)
	if err != nil {
		return err
	}
	if len(state) > action.MaxStateBytes || !json.Valid(state) || !utf8.Valid(state) {
		return fmt.Errorf("%w: state: must be a JSON value in UTF-8 of at most %d bytes", sqlease.ErrInvalidConfig, action.MaxStateBytes)
	}
	if err := r.in.Save(ctx, json.RawMessage(state)); err != nil {
		if errors.Is(err, sqlease.ErrLeaseLost) {
			return fmt.Errorf("%w: singleton %q: epoch %d is no longer current: the process must exit", sqlease.ErrConflict, name, epoch)
		}
		return err
	}
	return nil
}

func (h *singletonHost) Heartbeat(ctx context.Context, name string, epoch int64, secret string) error {
	r, err := h.current(name, epoch, secret)
	if err != nil {
		return err
	}
	if err := r.in.Heartbeat(ctx); err != nil {
		if errors.Is(err, sqlease.ErrLeaseLost) {
			return fmt.Errorf("%w: singleton %q: epoch %d is no longer current: the process must exit", sqlease.ErrConflict, name, epoch)
		}
		return err
	}
	return nil
}

func (h *singletonHost) Stale() []string { return h.node.Stale() }

// singletonMetrics exports this node's singletons: the dead man's switch's
// heartbeat age, whether it runs here, and state decode failures.
type singletonMetrics struct {
	node    *singleton.Node
	age     *prometheus.Desc
	stale   *prometheus.Desc
	running *prometheus.Desc
	decode  *prometheus.CounterVec
}

func newSingletonMetrics(reg prometheus.Registerer) *singletonMetrics {
	m := &singletonMetrics{
		age: prometheus.NewDesc("sqlease_singleton_heartbeat_age_seconds",
			"Seconds since the last heartbeat (or start) of a singleton this node runs.", []string{"singleton"}, nil),
		stale: prometheus.NewDesc("sqlease_singleton_stale",
			"1 while a singleton this node runs is stale: past its start grace, its last heartbeat is older than 2 × its heartbeat interval (the dead man's switch; /readyz answers 503).", []string{"singleton"}, nil),
		running: prometheus.NewDesc("sqlease_singleton_running",
			"1 while this node runs the singleton, else 0.", []string{"singleton"}, nil),
		decode: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sqlease_singleton_state_decode_failures_total",
			Help: "Saved states that could not be decoded; the singleton started from its initial state."}, []string{"singleton"}),
	}
	reg.MustRegister(m, m.decode)
	return m
}

func (m *singletonMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.age
	ch <- m.stale
	ch <- m.running
}

func (m *singletonMetrics) Collect(ch chan<- prometheus.Metric) {
	if m.node == nil {
		return
	}
	for _, st := range m.node.Status() {
		run := 0.0
		if st.Running {
			run = 1
			stale := 0.0
			if st.Stale {
				stale = 1
			}
			ch <- prometheus.MustNewConstMetric(m.age, prometheus.GaugeValue, st.HeartbeatAge.Seconds(), st.Name)
			ch <- prometheus.MustNewConstMetric(m.stale, prometheus.GaugeValue, stale, st.Name)
		}
		ch <- prometheus.MustNewConstMetric(m.running, prometheus.GaugeValue, run, st.Name)
	}
}

// StateDecodeFailed and Running make it the node's singleton.Observer.
func (m *singletonMetrics) StateDecodeFailed(name string) { m.decode.WithLabelValues(name).Inc() }
func (m *singletonMetrics) Running(string, bool)          {}
