package singleton_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sqlease/sqlease"
	"github.com/sqlease/sqlease/internal/dbtest"
	"github.com/sqlease/sqlease/singleton"
)

// checkpoint is the state of the singletons below: a count, and the mark a
// body saves on its way out.
type checkpoint struct {
	N    int    `json:"n"`
	Last string `json:"last,omitempty"`
}

// windDown is a body that counts and saves, and, once its context ends,
// takes a moment (as a process does after SIGTERM) and saves once more,
// marking the state "bye from <holder>@<epoch>". It reports that last
// save's error, and each state it started from, through the channels.
func windDown(holder string, lastErr chan<- error, started chan<- checkpoint) func(ctx context.Context, in *singleton.Instance[checkpoint]) error {
	return func(ctx context.Context, in *singleton.Instance[checkpoint]) error {
		select {
		case started <- in.State():
		default:
		}
		s := in.State()
		for ctx.Err() == nil {
			s.N++
			if err := in.Save(ctx, s); err != nil {
				if ctx.Err() != nil {
					break // the save was cut short by the stop
				}
				return err
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
		time.Sleep(100 * time.Millisecond) // winding up
		s.Last = fmt.Sprintf("bye from %s@%d", holder, in.Token().Epoch)
		err := in.Save(context.Background(), s)
		select {
		case lastErr <- err:
		default:
		}
		return err
	}
}

// A graceful stop — the node shutting down, the singleton unregistered
// (the daemon: paused, deleted, redefined), or given back to even out the
// fleet — keeps the save the body makes after its context ended: the node
// keeps the lease until the body returns, and the next holder starts from
// that save. Before, the gate closed first and that save was refused.
func TestGracefulStopKeepsTheLastSave(t *testing.T) {
	for _, how := range []string{"shutdown", "unregister", "rebalance"} {
		t.Run(how, func(t *testing.T) {
			dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
				lastErr := make(chan error, 10)
				startedA, startedB := make(chan checkpoint, 10), make(chan checkpoint, 10)
				names := []string{"s0"}
				if how == "rebalance" {
					names = []string{"s0", "s1"} // a holds both until b joins
				}
				register := func(holder string, started chan checkpoint) func(n *singleton.Node) {
					return func(n *singleton.Node) {
						for _, name := range names {
							if err := singleton.Register(n, singleton.Config[checkpoint]{Name: name, HeartbeatInterval: time.Second,
								StopTimeout: 5 * time.Second, Body: windDown(holder, lastErr, started)}); err != nil {
								t.Fatal(err)
							}
						}
					}
				}
				a := newNode(t, newStore(t), "a", register("a", startedA))
				dbtest.WaitFor(t, 10*time.Second, "a to run them all", func() bool {
					k := 0
					for _, s := range a.Status() {
						if s.Running {
							k++
						}
					}
					return k == len(names)
				})
				time.Sleep(100 * time.Millisecond) // a few saves
				// b competes too (and, with two singletons, makes a hold
				// more than its share).
				newNode(t, newStore(t), "b", register("b", startedB))
				switch how {
				case "shutdown":
					a.stop()
				case "unregister":
					if !a.Unregister("s0") {
						t.Fatal("not registered")
					}
				}
				var err error
				select {
				case err = <-lastErr:
				case <-time.After(20 * time.Second):
					t.Fatal("no body of a stopped")
				}
				if err != nil {
					t.Fatalf("the save after the body's context ended (a graceful %s) was refused: %v", how, err)
				}
				var got checkpoint
				select {
				case got = <-startedB:
				case <-time.After(20 * time.Second):
					t.Fatal("b did not start the singleton a gave up")
				}
				if !strings.HasPrefix(got.Last, "bye from a@") {
					t.Fatalf("b started from %+v, want a's last save (bye from a@…)", got)
				}
			})
		})
	}
}

// skewClock is the system clock, moved on by jump: a node whose clock
// jumps past its lease is one that was frozen that long.
type skewClock struct{ skew atomic.Int64 }

func (c *skewClock) Now() time.Time       { return time.Now().Add(time.Duration(c.skew.Load())) }
func (c *skewClock) jump(d time.Duration) { c.skew.Add(int64(d)) }

// A graceful stop accepts saves only while the node can still trust its
// lease: a node frozen past it (here its clock jumps, as a frozen
// process's does when it wakes) has its gate closed, and its late save is
// refused and changes nothing — while the same stop accepted the save
// before.
func TestFrozenStoppingNodesLateSaveIsRefused(t *testing.T) {
	dbtest.Dialects(t, func(t *testing.T, newStore dbtest.Open) {
		st := newStore(t)
		clock := &skewClock{}
		const lease = time.Second
		n, err := singleton.NewNode(singleton.NodeConfig{Store: st, HolderID: "a", Clock: clock,
			LeaseDuration: lease, RenewInterval: 150 * time.Millisecond, AcquireInterval: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		saved, stopping, resume := make(chan struct{}), make(chan struct{}), make(chan struct{})
		var first, late error
		if err := singleton.Register(n, singleton.Config[checkpoint]{Name: "s0", StopTimeout: 10 * time.Second,
			Body: func(ctx context.Context, in *singleton.Instance[checkpoint]) error {
				if err := in.Save(ctx, checkpoint{N: 1}); err != nil {
					return err
				}
				close(saved)
				<-ctx.Done()
				first = in.Save(context.Background(), checkpoint{N: 2, Last: "in time"})
				close(stopping)
				<-resume
				late = in.Save(context.Background(), checkpoint{N: 3, Last: "late"})
				return nil
			}}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = n.Run(ctx) }()
		select {
		case <-saved:
		case <-time.After(10 * time.Second):
			t.Fatal("the body did not save")
		}
		cancel()
		select {
		case <-stopping:
		case <-time.After(10 * time.Second):
			t.Fatal("the body's context did not end")
		}
		clock.jump(3 * lease) // frozen past the lease
		close(resume)
		<-done
		if first != nil {
			t.Fatalf("the save made in time during the graceful stop was refused: %v", first)
		}
		if !errors.Is(late, sqlease.ErrLeaseLost) {
			t.Fatalf("the late save after a freeze past the lease: %v, want ErrLeaseLost", late)
		}
		row, err := st.Singleton(context.Background(), "s0")
		if err != nil {
			t.Fatal(err)
		}
		if string(row.State) != `{"n":2,"last":"in time"}` {
			t.Fatalf("state %s, want the save made in time", row.State)
		}
	})
}
