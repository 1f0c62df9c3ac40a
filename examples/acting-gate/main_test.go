package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sqlease/sqlease/internal/pgtest"
)

// Two senders, the leader stopped: the other takes over within a second
// (advisory mode: the lock is freed when the session ends), and the
// receiver never sees an older epoch after a newer one.
func TestActingGate(t *testing.T) {
	url := os.Getenv("SQLEASE_TEST_POSTGRES_URL")
	if url == "" {
		url = pgtest.Start(t).URL()
	}
	dsn := pgtest.CreateDatabase(t, url)
	type send struct {
		epoch  int64
		holder string
		at     time.Time
	}
	var mu sync.Mutex
	var sends []send
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e, _ := strconv.ParseInt(r.Header.Get("Sqlease-Epoch"), 10, 64)
		mu.Lock()
		sends = append(sends, send{e, r.Header.Get("Sqlease-Holder"), time.Now()})
		mu.Unlock()
	}))
	defer srv.Close()
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithCancel(context.Background())
	doneA, doneB := make(chan error, 1), make(chan error, 1)
	go func() { doneA <- run(ctxA, dsn, srv.URL, "a", io.Discard) }()
	time.Sleep(500 * time.Millisecond)
	go func() { doneB <- run(ctxB, dsn, srv.URL, "b", io.Discard) }()
	time.Sleep(500 * time.Millisecond)
	stopA()
	stopped := time.Now()
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	stopB()
	if err := <-doneB; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var maxEpoch int64
	var firstB time.Time
	for _, s := range sends {
		if s.epoch < maxEpoch {
			t.Fatalf("a send under epoch %d by %s after epoch %d's", s.epoch, s.holder, maxEpoch)
		}
		maxEpoch = s.epoch
		if s.holder == "b" && firstB.IsZero() {
			firstB = s.at
		}
	}
	if firstB.IsZero() || firstB.Sub(stopped) > time.Second {
		t.Fatalf("b sent first %v after a stopped (want within a second; %d sends)", firstB.Sub(stopped), len(sends))
	}
	t.Logf("%d sends; b took over %v after a stopped", len(sends), firstB.Sub(stopped).Round(time.Millisecond))
}
