package main

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/sqlease/sqlease/sqlite"
)

// Two instances on one database, the first leader stopped mid-way: every
// order is submitted exactly once, each under the epoch of the instance
// that held the lease.
func TestSubmissionManager(t *testing.T) {
	path := filepath.Join(t.TempDir(), "orders.db")
	ctxA, stopA := context.WithCancel(context.Background())
	ctxB, stopB := context.WithTimeout(context.Background(), 4*time.Second)
	defer stopB()
	doneA, doneB := make(chan error, 1), make(chan error, 1)
	go func() { doneA <- run(ctxA, path, "a", 30, io.Discard) }()
	time.Sleep(300 * time.Millisecond)
	go func() { doneB <- run(ctxB, path, "b", 30, io.Discard) }()
	time.Sleep(700 * time.Millisecond)
	stopA() // a releases the lease; b takes over and submits the rest
	if err := <-doneA; err != nil {
		t.Fatal(err)
	}
	if err := <-doneB; err != nil {
		t.Fatal(err)
	}
	store, err := sqlite.OpenStore(context.Background(), path, "sqlease")
	if err != nil {
		t.Fatal(err)
	}
	defer store.DB().Close()
	var total, submitted, holders int
	if err := store.DB().QueryRow(`SELECT count(*), count(submitted_epoch), count(DISTINCT submitted_by) FROM orders`).Scan(&total, &submitted, &holders); err != nil {
		t.Fatal(err)
	}
	if total != 60 || submitted != 60 {
		t.Fatalf("%d of %d orders submitted, want all", submitted, total)
	}
	t.Logf("60 orders submitted by %d instance(s)", holders)
}
