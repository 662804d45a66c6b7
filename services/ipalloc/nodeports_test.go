package ipalloc_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/ipalloc"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
)

// nodePortSvc is a NodePort Service with the given ports (protocol/port/
// nodePort).
func nodePortSvc(name string, ports ...*corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		Metadata: &corev1.ObjectMeta{Namespace: "default", Name: name},
		Spec:     &corev1.ServiceSpec{Type: "NodePort", Ports: ports},
	}
}

func port(protocol string, p, nodePort int32) *corev1.ServicePort {
	return &corev1.ServicePort{Name: fmt.Sprintf("%s-%d", protocol, p), Protocol: protocol, Port: p, NodePort: nodePort}
}

func newPortAlloc(t *testing.T, ports string) (*ipalloc.Allocator, *objects.Store) {
	t.Helper()
	a, err := ipalloc.New(ipalloc.Config{CIDR: "10.96.0.0/16", NodePorts: ports})
	if err != nil {
		t.Fatal(err)
	}
	return a, objects.FromKV(objectstest.New())
}

// TestNodePortCreate: a NodePort Service gets a node port per port from
// the range (the dynamic band above the static one first), a requested
// port when free and in range, the same node port for two protocols of
// one port number; a taken or out-of-range request is refused with
// kube-apiserver's message and nothing is written.
func TestNodePortCreate(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		given   *corev1.Service
		want    []int32 // 0: any in the dynamic band
		wantMsg string
	}{
		{name: "allocates", given: nodePortSvc("a", port("TCP", 80, 0)), want: []int32{0}},
		{name: "honours a request", given: nodePortSvc("a", port("TCP", 80, 30080)), want: []int32{30080}},
		{name: "one port number, two protocols, one node port", given: nodePortSvc("a", port("TCP", 53, 0), port("UDP", 53, 0)), want: []int32{-1, -1}},
		{name: "requested by the second of a pair", given: nodePortSvc("a", port("TCP", 53, 0), port("UDP", 53, 30053)), want: []int32{30053, 30053}},
		{name: "taken", given: nodePortSvc("a", port("TCP", 80, 30000)),
			wantMsg: "spec.ports[0].nodePort: Invalid value: 30000: provided port is already allocated"},
		{name: "out of range", given: nodePortSvc("a", port("TCP", 80, 8080)),
			wantMsg: "spec.ports[0].nodePort: Invalid value: 8080: provided port is not in the valid range. The range of valid ports is 30000-32767"},
		{name: "a ClusterIP Service gets none", given: &corev1.Service{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "a"},
			Spec: &corev1.ServiceSpec{Type: "ClusterIP", Ports: []*corev1.ServicePort{port("TCP", 80, 0)}}}, want: []int32{-2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, st := newPortAlloc(t, "")
			if _, err := a.Create(ctx, st, nodePortSvc("holder", port("TCP", 1, 30000))); err != nil {
				t.Fatal(err)
			}
			_, err := a.Create(ctx, st, tc.given)
			if tc.wantMsg != "" {
				var e *ipalloc.Error
				if !errors.As(err, &e) || err.Error() != tc.wantMsg {
					t.Fatalf("Create = %v\nwant %s", err, tc.wantMsg)
				}
				if held, _ := ipalloc.AllocatedNodePorts(ctx, st); len(held) != 1 {
					t.Fatalf("reservations %v after a refused create, want only the holder's", held)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := objects.Get[*corev1.Service](ctx, st, "default", "a")
			if err != nil {
				t.Fatal(err)
			}
			held, _ := ipalloc.AllocatedNodePorts(ctx, st)
			for i, w := range tc.want {
				np := got.Spec.Ports[i].NodePort
				switch {
				case w == -2:
					if np != 0 {
						t.Fatalf("port %d has node port %d, want none", i, np)
					}
					continue
				case w == 0 && (np < 30086 || np > 32767): // the static band is 30000-30085
					t.Fatalf("port %d has node port %d, want one in 30086-32767", i, np)
				case w == -1 && np != got.Spec.Ports[0].NodePort:
					t.Fatalf("ports %v do not share a node port", got.Spec.Ports)
				case w > 0 && np != w:
					t.Fatalf("port %d has node port %d, want %d", i, np, w)
				}
				if held[np] != "default/a" {
					t.Fatalf("node port %d reserved for %q, want default/a (%v)", np, held[np], held)
				}
			}
		})
	}
}

// TestNodePortUpdate: an update keeps the node ports it names, reserves
// new ones, releases the ones it drops; turning into a ClusterIP Service
// releases them all; a delete releases what is left.
func TestNodePortUpdate(t *testing.T) {
	ctx := context.Background()
	a, st := newPortAlloc(t, "")
	s := nodePortSvc("a", port("TCP", 80, 30080), port("TCP", 443, 30443))
	if _, err := a.Create(ctx, st, s); err != nil {
		t.Fatal(err)
	}
	update := func(next *corev1.Service) *corev1.Service {
		t.Helper()
		old, err := objects.Get[*corev1.Service](ctx, st, "default", "a")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Update(ctx, st, old, next); err != nil {
			t.Fatal(err)
		}
		return next
	}
	heldBy := func() map[int32]string {
		held, err := ipalloc.AllocatedNodePorts(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		return held
	}
	// 443 goes, 8080 comes with a new port picked, 80 stays.
	next := update(nodePortSvc("a", port("TCP", 80, 30080), port("TCP", 8080, 0)))
	picked := next.Spec.Ports[1].NodePort
	if held := heldBy(); len(held) != 2 || held[30080] != "default/a" || held[picked] != "default/a" || picked == 30443 {
		t.Fatalf("after the update: ports %v, reservations %v", next.Spec.Ports, held)
	}
	// 30443 is free again.
	if _, err := a.Create(ctx, st, nodePortSvc("b", port("TCP", 1, 30443))); err != nil {
		t.Fatalf("released node port not reusable: %v", err)
	}
	// Asking for another Service's port is refused.
	old, _ := objects.Get[*corev1.Service](ctx, st, "default", "a")
	_, err := a.Update(ctx, st, old, nodePortSvc("a", port("TCP", 80, 30080), port("TCP", 8080, 30443)))
	if !errors.Is(err, ipalloc.ErrPortAllocated) || err.Error() != "spec.ports[1].nodePort: Invalid value: 30443: provided port is already allocated" {
		t.Fatalf("update to a taken port: %v", err)
	}
	// To ClusterIP: every node port goes.
	cip := nodePortSvc("a", port("TCP", 80, 0), port("TCP", 8080, 0))
	cip.Spec.Type = "ClusterIP"
	update(cip)
	if held := heldBy(); len(held) != 1 || held[30443] != "default/b" {
		t.Fatalf("reservations after turning into ClusterIP: %v", held)
	}
	// Back to NodePort, then delete.
	update(nodePortSvc("a", port("TCP", 80, 0)))
	if held := heldBy(); len(held) != 2 {
		t.Fatalf("reservations after turning into NodePort again: %v", held)
	}
	got, _ := objects.Get[*corev1.Service](ctx, st, "default", "a")
	if _, err := a.Delete(ctx, st, got); err != nil {
		t.Fatal(err)
	}
	if held := heldBy(); len(held) != 1 {
		t.Fatalf("reservations after delete: %v", held)
	}
}

// TestNodePortsNeverTwice fills a range of 10 node ports from concurrent
// creators: every Service gets its own, and the 11th finds the range
// full.
func TestNodePortsNeverTwice(t *testing.T) {
	ctx := context.Background()
	a, st := newPortAlloc(t, "30000-30009")
	var wg sync.WaitGroup
	errs := make([]error, 11)
	for i := range errs {
		wg.Go(func() { _, errs[i] = a.Create(ctx, st, nodePortSvc(fmt.Sprint("s", i), port("TCP", 80, 0))) })
	}
	wg.Wait()
	full := 0
	for _, err := range errs {
		switch {
		case errors.Is(err, ipalloc.ErrPortsFull):
			full++
		case err != nil:
			t.Fatal(err)
		}
	}
	if full != 1 {
		t.Fatalf("%d creates found the range full, want 1", full)
	}
	svcs, _, err := objects.List[*corev1.Service](ctx, st, "")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int32]string{}
	for _, s := range svcs {
		np := s.Spec.Ports[0].NodePort
		if prev, dup := seen[np]; dup {
			t.Fatalf("node port %d given to %s and %s", np, prev, s.Metadata.Name)
		}
		seen[np] = s.Metadata.Name
	}
	if held, _ := ipalloc.AllocatedNodePorts(ctx, st); len(held) != 10 || len(seen) != 10 {
		t.Fatalf("%d reservations, %d services, want 10", len(held), len(seen))
	}
}

func TestParsePortRange(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{{"30000-32767", true}, {"1-65535", true}, {"5-4", false}, {"0-10", false}, {"30000", false}, {"a-b", false}, {"1-70000", false}} {
		if _, err := ipalloc.ParsePortRange(tc.in); (err == nil) != tc.ok {
			t.Errorf("ParsePortRange(%q) = %v, want ok=%v", tc.in, err, tc.ok)
		}
	}
}
