package action

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/scheduler"
)

// BenchmarkHTTPDelivery is one delivery of the daemon's HTTP action as a
// node makes it: a run token of its own (redacted from the output), the
// output kept, a receiver that answers 204 on a kept-alive connection.
// The daemon bench (sqlease-bench -bench daemon) measures the whole node;
// this isolates the action's share of it.
func BenchmarkHTTPDelivery(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	defer httpTransport.CloseIdleConnections()
	raw := []byte(`{"http":{"url":"` + srv.URL + `/hook"}}`)
	run := sqlease.Run{JobID: 1, Job: "d-0000001", ScheduledFor: time.Now(), Attempt: 1, Holder: "n1", Epoch: 3, Action: raw}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			var t [24]byte
			_, _ = rand.Read(t[:])
			ctx, _ := scheduler.WithOutput(context.Background(), 4096)
			ctx = WithRunAccess(ctx, RunAccess{API: "http://127.0.0.1:1", Token: hex.EncodeToString(t[:])})
			if err := Handle(ctx, run); err != nil {
				b.Fatal(err)
			}
		}
	})
}
