package nodelifecycle

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
)

// replica is one nodelifecycle replica of a test, on its own store
// connection (closing it cuts the replica off the store).
type replica struct {
	name   string
	conn   interface{ Close() }
	c      *Controller
	stop   context.CancelFunc
	g      *errgroup.Group
	mu     sync.Mutex
	passes [][2]time.Time
}

func (r *replica) passList() [][2]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][2]time.Time(nil), r.passes...)
}

// leaseHolder is a Lease's holder as stored at one revision.
type leaseHolder struct {
	holder      string
	transitions int32
}

// TestOneLeaderActs (issue 39): two replicas of the controller over a
// real three-replica store elect one leader through the Lease
// kube-system/podflow-nodelifecycle, as kube-controller-manager does.
// The leader taints the dead node and evicts its pod; the other makes no
// pass. The leader is cut off the store (its connection closed, its
// process still running): it stops acting when it cannot renew, the
// other takes the Lease once it expired, and taints and evicts on a node
// that dies afterwards. A third replica stands by; the second stops
// cleanly and releases the Lease, and the third takes over. Throughout,
// the Lease passes from holder to holder once each (never back, never
// two), every pass of a replica ends before the next leader's first
// pass starts, and the Events of each node's taint and eviction name the
// replica that led then.
func TestOneLeaderActs(t *testing.T) {
	cl := raftstoretest.MakeCluster(t, 3)
	admin := objects.New(cl.Client(t))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// The Lease's history, from a watch of its key.
	var hmu sync.Mutex
	var history []leaseHolder
	w, err := admin.KV().Watch(ctx, objects.Leases.Key("kube-system", "podflow-nodelifecycle"), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	go func() {
		for ev := range w.Events() {
			if ev.Type != raftstore.EventPut {
				continue
			}
			var c struct {
				Spec struct {
					HolderIdentity   string `json:"holderIdentity"`
					LeaseTransitions int32  `json:"leaseTransitions"`
				} `json:"spec"`
			}
			u := objects.Leases.New().(*corev1.Unstructured)
			if objects.Decode(ev.KV, u) != nil || json.Unmarshal(u.GetContent(), &c) != nil {
				continue
			}
			hmu.Lock()
			if n := len(history); n == 0 || history[n-1].holder != c.Spec.HolderIdentity {
				history = append(history, leaseHolder{c.Spec.HolderIdentity, c.Spec.LeaseTransitions})
			}
			hmu.Unlock()
		}
	}()
	holders := func() []leaseHolder {
		hmu.Lock()
		defer hmu.Unlock()
		return append([]leaseHolder(nil), history...)
	}

	start := func(name string) *replica {
		t.Helper()
		nc := cl.Conn(t)
		kv, err := raftstore.NewClient(nc, raftstore.ClientConfig{WatchHeartbeatTimeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.MonitorPeriod = 100 * time.Millisecond
		// A store write may take a second on a loaded machine: a
		// leader renews within 3 s or stops.
		cfg.Election.LeaseDuration, cfg.Election.RenewDeadline, cfg.Election.RetryPeriod = 4*time.Second, 3*time.Second, 250*time.Millisecond
		c, err := New(stage.Env{Store: objects.New(kv), Pub: &stagetest.Publisher{}, Stage: "nodelifecycle", Replica: name,
			Log: slog.New(slog.DiscardHandler)}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := &replica{name: name, conn: nc, c: c}
		c.passed = func(s, e time.Time) {
			r.mu.Lock()
			r.passes = append(r.passes, [2]time.Time{s, e})
			r.mu.Unlock()
		}
		rctx, stop := context.WithCancel(ctx)
		g, gctx := errgroup.WithContext(rctx)
		if err := c.Start(gctx, g); err != nil {
			t.Fatal(err)
		}
		r.stop, r.g = stop, g
		t.Cleanup(func() { stop(); _ = g.Wait() })
		return r
	}
	deadNode := func(name string) {
		t.Helper()
		if _, err := admin.Create(ctx, node(name, time.Now().Add(-time.Hour))); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Create(ctx, pod("on-"+name, name)); err != nil {
			t.Fatal(err)
		}
	}
	// actedBy waits for node's taint and its pod's eviction, and returns
	// the replica the Events of both name.
	actedBy := func(node string) string {
		t.Helper()
		raftstoretest.WaitFor(t, 30*time.Second, node+" tainted and its pod evicted", func() bool {
			n, err := objects.Get[*corev1.Node](ctx, admin, "", node)
			if err != nil || !strings.Contains(taints(n), TaintNodeUnreachable+":NoExecute") {
				return false
			}
			p, err := objects.Get[*corev1.Pod](ctx, admin, "default", "on-"+node)
			return err == nil && p.GetMetadata().GetDeletionTimestamp() != nil
		})
		evs, _, err := objects.List[*corev1.Event](ctx, admin, "default")
		if err != nil {
			t.Fatal(err)
		}
		by := map[string]bool{}
		for _, ev := range evs {
			io := ev.GetInvolvedObject()
			if (io.GetKind() == "Node" && io.GetName() == node && ev.GetReason() == "NodeNotReady") ||
				(io.GetKind() == "Pod" && io.GetName() == "on-"+node && ev.GetReason() == "TaintManagerEviction") {
				by[ev.GetReportingInstance()] = true
			}
		}
		if len(by) != 1 {
			t.Fatalf("%s's taint and eviction reported by %v, want one replica", node, by)
		}
		for r := range by {
			return r
		}
		return ""
	}
	leads := func(r *replica) {
		t.Helper()
		raftstoretest.WaitFor(t, 30*time.Second, r.name+" leading", r.c.Leading)
	}
	// before: every pass of a ends before b's first starts.
	before := func(a, b *replica) {
		t.Helper()
		raftstoretest.WaitFor(t, 10*time.Second, b.name+"'s first pass", func() bool { return len(b.passList()) > 0 })
		ap, bp := a.passList(), b.passList()
		if len(ap) == 0 || len(bp) == 0 {
			t.Fatalf("%s made %d passes, %s %d", a.name, len(ap), b.name, len(bp))
		}
		if last, first := ap[len(ap)-1][1], bp[0][0]; !last.Before(first) {
			t.Fatalf("%s's last pass ended at %s, after %s's first began at %s: two acted at once", a.name, last.Format(time.StampMicro), b.name, first.Format(time.StampMicro))
		}
	}

	a := start("a")
	leads(a)
	b := start("b")
	deadNode("n1")
	if got := actedBy("n1"); got != "a" {
		t.Fatalf("n1 handled by %q, want the leader a", got)
	}
	time.Sleep(time.Second) // b has had many chances to pass
	if n := len(b.passList()); n != 0 || b.c.Leading() {
		t.Fatalf("the standby made %d passes (leading %v) while a led", n, b.c.Leading())
	}

	// a is cut off the store: it stops, b takes over.
	cut := time.Now()
	a.conn.Close()
	leads(b)
	t.Logf("b leads %s after a was cut off", time.Since(cut).Round(10*time.Millisecond))
	if a.c.Leading() {
		t.Fatal("a still leads, cut off the store, while b leads")
	}
	before(a, b)
	deadNode("n2")
	if got := actedBy("n2"); got != "b" {
		t.Fatalf("n2 handled by %q, want the new leader b", got)
	}

	// c stands by; b stops cleanly and releases the Lease: c takes over.
	c := start("c")
	time.Sleep(500 * time.Millisecond)
	if c.c.Leading() || len(c.passList()) != 0 {
		t.Fatal("c acts while b leads")
	}
	b.stop()
	if err := b.g.Wait(); err != nil {
		t.Fatal(err)
	}
	leads(c)
	before(b, c)
	deadNode("n3")
	if got := actedBy("n3"); got != "c" {
		t.Fatalf("n3 handled by %q, want c", got)
	}

	// Never two at once: the passes of all three, in order, each ends
	// before the next one of another replica begins.
	type pass struct {
		who        string
		start, end time.Time
	}
	var all []pass
	for _, r := range []*replica{a, b, c} {
		for _, p := range r.passList() {
			all = append(all, pass{r.name, p[0], p[1]})
		}
	}
	slices.SortFunc(all, func(x, y pass) int { return x.start.Compare(y.start) })
	for i := 1; i < len(all); i++ {
		if all[i].who != all[i-1].who && !all[i-1].end.Before(all[i].start) {
			t.Fatalf("%s passed from %s to %s, %s began at %s: two acted at once", all[i-1].who, all[i-1].start.Format(time.StampMicro),
				all[i-1].end.Format(time.StampMicro), all[i].who, all[i].start.Format(time.StampMicro))
		}
	}

	// The Lease went from a to b to c (a holder may lose and win it
	// again, empty between: a release), its transitions counted.
	h := holders()
	var names []string
	last := int32(0)
	for _, x := range h {
		if x.transitions < last {
			t.Errorf("leaseTransitions went back: %v", h)
		}
		last = x.transitions
		name := strings.SplitN(x.holder, "_", 2)[0]
		if name != "" && (len(names) == 0 || names[len(names)-1] != name) {
			names = append(names, name)
		}
	}
	if got := strings.Join(names, ","); got != "a,b,c" {
		t.Fatalf("the Lease's holders in turn: %q, want a,b,c (%v)", got, h)
	}
	if last < 2 {
		t.Errorf("leaseTransitions %d after three leaders", last)
	}
}

func taints(n *corev1.Node) string {
	var s []string
	for _, t := range n.GetSpec().GetTaints() {
		s = append(s, t.GetKey()+":"+t.GetEffect())
	}
	return strings.Join(s, " ")
}
