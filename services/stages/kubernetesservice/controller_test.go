package kubernetesservice

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/ipalloc"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
)

func newController(t *testing.T, st *objects.Store, replica string, ep netip.AddrPort) *Controller {
	t.Helper()
	alloc, err := ipalloc.New(ipalloc.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.ServiceIPs = alloc
	cfg.Endpoint = func() (netip.AddrPort, bool) { return ep, ep.IsValid() }
	cfg.Interval, cfg.LeaseTTL = 100*time.Millisecond, time.Second
	c, err := New(stage.Env{Store: st, Replica: replica, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sliceAddrs(t *testing.T, st *objects.Store) []string {
	t.Helper()
	sl, err := objects.Get[*corev1.EndpointSlice](context.Background(), st, Namespace, ServiceName)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range sl.GetEndpoints() {
		out = append(out, e.GetAddresses()...)
	}
	return out
}

// TestKubernetesService: replicas create default/kubernetes once, with
// the service CIDR's first IP and port 443 to the API's; the slice lists
// every live replica's address; a replica that stops leaves it at once,
// one whose lease expires (it died) once the TTL has passed; with no live
// lease the slice is never emptied.
func TestKubernetesService(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 1)
	st := objects.New(c.Client(t))
	ctx := context.Background()
	a := newController(t, st, "api-1", netip.MustParseAddrPort("10.244.1.1:6443"))
	b := newController(t, st, "api-2", netip.MustParseAddrPort("10.244.2.1:6443"))
	var wg sync.WaitGroup
	for _, x := range []*Controller{a, b} {
		wg.Go(func() {
			if err := x.Pass(ctx); err != nil {
				t.Errorf("reconcile: %v", err)
			}
		})
	}
	wg.Wait()
	svc, err := objects.Get[*corev1.Service](ctx, st, Namespace, ServiceName)
	if err != nil {
		t.Fatal(err)
	}
	sp := svc.GetSpec()
	if sp.GetClusterIp() != "10.96.0.1" || len(sp.GetPorts()) != 1 || sp.GetPorts()[0].GetPort() != 443 || sp.GetPorts()[0].GetName() != "https" ||
		sp.GetPorts()[0].GetTargetPort().GetIntVal() != 6443 || sp.GetType() != "ClusterIP" || len(sp.GetSelector()) != 0 ||
		svc.GetMetadata().GetLabels()["component"] != "apiserver" {
		t.Fatalf("service %v", svc)
	}
	if _, err := c.Client(t).Get(ctx, ipalloc.Key("10.96.0.1")); err != nil {
		t.Errorf("the ClusterIP is not reserved: %v", err)
	}
	if err := a.Pass(ctx); err != nil { // sees b's lease too now
		t.Fatal(err)
	}
	if got := fmt.Sprint(sliceAddrs(t, st)); got != "[10.244.1.1 10.244.2.1]" {
		t.Fatalf("slice %s, want both replicas", got)
	}
	sl, _ := objects.Get[*corev1.EndpointSlice](ctx, st, Namespace, ServiceName)
	if sl.GetMetadata().GetLabels()["kubernetes.io/service-name"] != ServiceName || sl.GetPorts()[0].GetPort() != 6443 || sl.GetAddressType() != "IPv4" {
		t.Errorf("slice %v", sl)
	}
	// The core/v1 Endpoints too, as kube-apiserver's reconciler writes
	// them (skip-mirror: their slice is the one above).
	eps, err := objects.Get[*corev1.Endpoints](ctx, st, Namespace, ServiceName)
	if err != nil {
		t.Fatal(err)
	}
	if ss := eps.GetSubsets(); len(ss) != 1 || len(ss[0].GetAddresses()) != 2 || ss[0].GetAddresses()[1].GetIp() != "10.244.2.1" ||
		ss[0].GetPorts()[0].GetPort() != 6443 || ss[0].GetPorts()[0].GetName() != "https" || eps.GetMetadata().GetLabels()[LabelSkipMirror] != "true" {
		t.Errorf("endpoints %v", eps)
	}

	// b stops: its lease and address go at once.
	bctx, stopB := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(bctx)
	if err := b.Start(gctx, g); err != nil {
		t.Fatal(err)
	}
	stopB()
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(sliceAddrs(t, st)); got != "[10.244.1.1]" {
		t.Errorf("after b stopped: %s", got)
	}

	// A replica that died: its lease outlives it by the TTL only.
	dead, _ := json.Marshal(lease{Port: 6443, Expires: time.Now().Add(-time.Second), Holder: "api-3"})
	if _, err := st.KV().Txn(ctx, raftstore.Txn{Ops: []raftstore.Op{{Type: raftstore.OpPut, Key: LeasePrefix + "10.244.3.1", Value: dead}}}); err != nil {
		t.Fatal(err)
	}
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(sliceAddrs(t, st)); got != "[10.244.1.1]" {
		t.Errorf("with an expired lease: %s", got)
	}
	if _, err := st.KV().Get(ctx, LeasePrefix+"10.244.3.1"); err == nil {
		t.Error("the expired lease was not deleted")
	}

	// Every lease expired: the slice keeps what it had.
	a.now = func() time.Time { return time.Now().Add(time.Hour) }
	if err := a.reconcileSlice(ctx, 6443); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(sliceAddrs(t, st)); got != "[10.244.1.1]" {
		t.Errorf("with no live lease: %s, want the last one kept", got)
	}
}

// TestServiceIPTaken: when a user's Service holds the first IP, the
// kubernetes Service is not created and the pass says why.
func TestServiceIPTaken(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 1)
	st := objects.New(c.Client(t))
	ctx := context.Background()
	alloc, _ := ipalloc.New(ipalloc.DefaultConfig())
	squatter := &corev1.Service{Metadata: &corev1.ObjectMeta{Name: "squatter", Namespace: "default"},
		Spec: &corev1.ServiceSpec{ClusterIp: "10.96.0.1", Ports: []*corev1.ServicePort{{Port: 80}}}}
	if _, err := alloc.Create(ctx, st, squatter); err != nil {
		t.Fatal(err)
	}
	a := newController(t, st, "api-1", netip.MustParseAddrPort("10.244.1.1:6443"))
	if err := a.Pass(ctx); err == nil {
		t.Error("reconcile with the ClusterIP taken succeeded")
	}
	if _, err := objects.Get[*corev1.Service](ctx, st, Namespace, ServiceName); err == nil {
		t.Error("the kubernetes Service was created without its IP")
	}
}

// TestEndpointMoves: a replica whose endpoint changes (its loopback
// fallback, then the node's bridge gateway once that is up) gives up the
// old address's lease at once instead of leaving it for the TTL.
func TestEndpointMoves(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 1)
	st := objects.New(c.Client(t))
	ctx := context.Background()
	a := newController(t, st, "api-1", netip.MustParseAddrPort("127.0.0.1:6443"))
	a.cfg.LeaseTTL = time.Hour
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	moved := netip.MustParseAddrPort("10.244.1.1:6443")
	a.cfg.Endpoint = func() (netip.AddrPort, bool) { return moved, true }
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(sliceAddrs(t, st)); got != "[10.244.1.1]" {
		t.Errorf("after the move: %s, want only the new address", got)
	}
}

// TestNotAReconciler: composed beside the api stage, a Reconcile method
// would be run by the stage's resync as well as by Start's ticker, two
// passes at once on one replica's state.
func TestNotAReconciler(t *testing.T) {
	if _, ok := any(&Controller{}).(stage.Reconciler); ok {
		t.Fatal("Controller is a stage.Reconciler")
	}
}

// TestEndpointChangeFollowedAtOnce: when the replica's endpoint changes
// (the node's bridge came up, the front door serves its gateway) the slice
// follows within a second or two, not at the next Interval.
func TestEndpointChangeFollowedAtOnce(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 1)
	st := objects.New(c.Client(t))
	var mu sync.Mutex
	ep := netip.MustParseAddrPort("127.0.0.1:6443")
	a := newController(t, st, "api-1", ep)
	a.cfg.Interval, a.cfg.LeaseTTL = time.Minute, 2*time.Minute
	a.cfg.Endpoint = func() (netip.AddrPort, bool) { mu.Lock(); defer mu.Unlock(); return ep, true }
	ctx, cancel := context.WithCancel(context.Background())
	g, gctx := errgroup.WithContext(ctx)
	if err := a.Start(gctx, g); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = g.Wait() }()
	raftstoretest.WaitFor(t, 10*time.Second, "the loopback endpoint", func() bool { return fmt.Sprint(sliceAddrs(t, st)) == "[127.0.0.1]" })
	mu.Lock()
	ep = netip.MustParseAddrPort("10.244.1.1:6443")
	mu.Unlock()
	raftstoretest.WaitFor(t, 5*time.Second, "the gateway endpoint", func() bool { return fmt.Sprint(sliceAddrs(t, st)) == "[10.244.1.1]" })
}
