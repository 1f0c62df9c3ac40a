package prom

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// SetNow replaces the clock of the heartbeat age (tests only).
func SetNow(o *Observer, now func() time.Time) { o.now = now }

func (o *Observer) BlockedForTest() prometheus.Counter { return o.blocked }
func (o *Observer) LostForTest() prometheus.Counter    { return o.lost }
