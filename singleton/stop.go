package singleton

import (
	"context"
	"log/slog"
	"time"

	"github.com/sqlease/sqlease"
)

// A graceful stop (package doc, "Stopping") ends a body while its term goes
// on, so that what it saves on its way out is kept.

// termCtl is one term's body, for a graceful stop.
type termCtl struct {
	tok  sqlease.Token
	stop context.CancelFunc // ends the body's context, not the term
	done chan struct{}      // closed when the term's runTerm has returned
}

// bodiesOff reports whether no body may start on n for e: the node is
// stopping or e was unregistered.
func (n *Node) bodiesOff(e *entry) bool {
	e.mu.Lock()
	closing := e.closing
	e.mu.Unlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	return closing || n.stopping
}

// stopBody stops the body of e's current term gracefully — of tok's term
// only, unless tok is zero — and waits until it has returned, at most
// e.stopTimeout. The term goes on meanwhile: the lease is renewed and the
// gate stays open, so the body's last saves are accepted (and fenced) until
// it returns. A term lost meanwhile ends the wait as it ends the body.
func (e *entry) stopBody(log *slog.Logger, tok sqlease.Token) {
	e.mu.Lock()
	t := e.term
	e.mu.Unlock()
	if t == nil || !tok.IsZero() && t.tok != tok {
		return
	}
	t.stop()
	wait := time.NewTimer(e.stopTimeout)
	defer wait.Stop()
	select {
	case <-t.done:
	case <-wait.C:
		log.Warn("singleton_stop_timeout", slog.String("singleton", e.name), slog.Int64("lease_epoch", t.tok.Epoch),
			slog.Duration("stop_timeout", e.stopTimeout),
			slog.String("hint", "the body did not return within its stop timeout after its context ended; the gate closes now"))
	}
}
