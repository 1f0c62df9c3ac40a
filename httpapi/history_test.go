package httpapi_test

import (
	"context"
	"testing"

	"github.com/sqlease/sqlease/httpapi"
	"github.com/sqlease/sqlease/sqlstore"
)

// TestLeaseHistoryPaged: GET /v1/leases/{name}/history pages newest first
// through every event exactly once, each answer as the document says.
func TestLeaseHistoryPaged(t *testing.T) {
	c := checker(t)
	n := newNode(t, dbPath(t), nodeOpts{noElector: true})
	ctx := context.Background()
	const total = 7
	for i := 1; i <= total; i++ {
		if err := n.store.RecordLeaseEvent(ctx, sqlstore.LeaseEvent{Lease: "lead", Event: sqlstore.EventAcquired, Holder: "node-a", Epoch: int64(i)}, 0); err != nil {
			t.Fatal(err)
		}
	}
	var epochs []int64
	after := ""
	for pages := 0; ; pages++ {
		if pages > total {
			t.Fatal("too many pages")
		}
		res := n.do("GET", "/v1/leases/lead/history?limit=3&after="+after, "")
		if err := c.Check("GET /v1/leases/{name}/history", res.status, res.header.Get("Content-Type"), res.body); err != nil {
			t.Fatal(err)
		}
		var p httpapi.LeaseHistory
		res.json(t, &p)
		for _, e := range p.Events {
			epochs = append(epochs, e.Epoch)
			if e.Event != "acquired" || e.Holder != "node-a" || e.At == "" {
				t.Errorf("event: %+v", e)
			}
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if len(epochs) != total {
		t.Fatalf("paged through %v", epochs)
	}
	for i, e := range epochs {
		if e != int64(total-i) {
			t.Fatalf("not newest first: %v", epochs)
		}
	}
	for _, path := range []string{"/v1/leases/lead/history?after=x", "/v1/leases/lead/history?limit=0", "/v1/leases/bad%20name/history"} {
		res := n.do("GET", path, "")
		res.problem(t, 400)
		if err := c.Check("GET /v1/leases/{name}/history", res.status, res.header.Get("Content-Type"), res.body); err != nil {
			t.Error(err)
		}
	}
	res := n.do("GET", "/v1/leases/none/history", "")
	var p httpapi.LeaseHistory
	res.json(t, &p)
	if res.status != 200 || len(p.Events) != 0 || p.Next != "" {
		t.Errorf("a lease without history: %d %s", res.status, res.body)
	}
}
