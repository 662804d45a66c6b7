package ipalloc_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/ipalloc"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
)

func svc(name, clusterIP string, ips ...string) *corev1.Service {
	return &corev1.Service{
		Metadata: &corev1.ObjectMeta{Namespace: "default", Name: name},
		Spec:     &corev1.ServiceSpec{ClusterIp: clusterIP, ClusterIps: ips, Ports: []*corev1.ServicePort{{Port: 80}}},
	}
}

func newAlloc(t *testing.T, cidr string) (*ipalloc.Allocator, *objects.Store) {
	t.Helper()
	a, err := ipalloc.New(ipalloc.Config{CIDR: cidr})
	if err != nil {
		t.Fatal(err)
	}
	return a, objects.FromKV(objectstest.New())
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cidr string
		ok   bool
	}{
		{"10.96.0.0/16", true},
		{"10.0.0.0/28", true},
		{"10.96.0.1/16", false}, // host bits
		{"10.0.0.0/29", false},
		{"10.0.0.0/7", false},
		{"fd00::/108", false},
		{"nonsense", false},
	} {
		t.Run(tc.cidr, func(t *testing.T) {
			if err := (ipalloc.Config{CIDR: tc.cidr}).Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate(%q) = %v, want ok=%v", tc.cidr, err, tc.ok)
			}
		})
	}
	if err := ipalloc.DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestCreate(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		given   *corev1.Service
		wantIP  string // "" = any in range
		wantErr error
	}{
		{name: "allocates", given: svc("a", "")},
		{name: "honours a requested IP", given: svc("b", "10.96.0.10"), wantIP: "10.96.0.10"},
		{name: "honours clusterIPs", given: svc("c", "", "10.96.0.11"), wantIP: "10.96.0.11"},
		{name: "headless", given: svc("d", "None"), wantIP: "None"},
		{name: "out of range", given: svc("e", "10.0.0.1"), wantErr: ipalloc.ErrNotInRange},
		{name: "network address", given: svc("f", "10.96.0.0"), wantErr: ipalloc.ErrNotInRange},
		{name: "broadcast address", given: svc("g", "10.96.255.255"), wantErr: ipalloc.ErrNotInRange},
		{name: "not an IP", given: svc("h", "ten"), wantErr: ipalloc.ErrInvalid},
		{name: "disagreeing fields", given: svc("i", "10.96.0.12", "10.96.0.13"), wantErr: ipalloc.ErrInvalid},
		{name: "dual stack", given: svc("j", "", "10.96.0.12", "fd00::1"), wantErr: ipalloc.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, st := newAlloc(t, "10.96.0.0/16")
			_, err := a.Create(ctx, st, tc.given)
			if tc.wantErr != nil {
				var e *ipalloc.Error
				if !errors.Is(err, tc.wantErr) || !errors.As(err, &e) {
					t.Fatalf("Create = %v, want %v as *Error", err, tc.wantErr)
				}
				if _, err := objects.Get[*corev1.Service](ctx, st, "default", tc.given.Metadata.Name); !errors.Is(err, raftstore.ErrNotFound) {
					t.Fatalf("refused Service stored: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := objects.Get[*corev1.Service](ctx, st, "default", tc.given.Metadata.Name)
			if err != nil {
				t.Fatal(err)
			}
			ip := got.Spec.ClusterIp
			if len(got.Spec.ClusterIps) != 1 || got.Spec.ClusterIps[0] != ip {
				t.Fatalf("clusterIPs %v, clusterIP %q", got.Spec.ClusterIps, ip)
			}
			if tc.wantIP != "" && ip != tc.wantIP {
				t.Fatalf("clusterIP %q, want %q", ip, tc.wantIP)
			}
			held, err := ipalloc.Allocated(ctx, st)
			if err != nil {
				t.Fatal(err)
			}
			if ip == ipalloc.None {
				if len(held) != 0 {
					t.Fatalf("headless Service holds %v", held)
				}
				return
			}
			if !a.CIDR().Contains(netip.MustParseAddr(ip)) {
				t.Fatalf("clusterIP %s outside %s", ip, a.CIDR())
			}
			if held[ip] != "default/"+tc.given.Metadata.Name {
				t.Fatalf("reservations %v, want %s held by it", held, ip)
			}
		})
	}
}

func TestRequestedIPAlreadyAllocated(t *testing.T) {
	ctx := context.Background()
	a, st := newAlloc(t, "10.96.0.0/16")
	if _, err := a.Create(ctx, st, svc("a", "10.96.0.10")); err != nil {
		t.Fatal(err)
	}
	_, err := a.Create(ctx, st, svc("b", "10.96.0.10"))
	if !errors.Is(err, ipalloc.ErrAllocated) {
		t.Fatalf("second Create = %v, want ErrAllocated", err)
	}
	want := `spec.clusterIPs: Invalid value: ["10.96.0.10"]: failed to allocate IP 10.96.0.10: provided IP is already allocated`
	if err.Error() != want {
		t.Fatalf("message %q\nwant    %q", err, want)
	}
	if _, err := a.Create(ctx, st, svc("a", "10.96.0.11")); !errors.Is(err, raftstore.ErrConflict) {
		t.Fatalf("Create of an existing Service = %v, want a conflict", err)
	}
	if held, _ := ipalloc.Allocated(ctx, st); len(held) != 1 {
		t.Fatalf("reservations %v, want only 10.96.0.10", held)
	}
}

// TestNeverTwice fills a /28 (14 usable IPs) from concurrent creators:
// every Service gets a distinct IP, and the 15th finds the range full.
func TestNeverTwice(t *testing.T) {
	ctx := context.Background()
	a, st := newAlloc(t, "10.1.0.0/28")
	var wg sync.WaitGroup
	errs := make([]error, 15)
	for i := range errs {
		wg.Go(func() { _, errs[i] = a.Create(ctx, st, svc(fmt.Sprint("s", i), "")) })
	}
	wg.Wait()
	full := 0
	for _, err := range errs {
		switch {
		case errors.Is(err, ipalloc.ErrFull):
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
	seen := map[string]string{}
	for _, s := range svcs {
		if prev, dup := seen[s.Spec.ClusterIp]; dup {
			t.Fatalf("%s given to %s and %s", s.Spec.ClusterIp, prev, s.Metadata.Name)
		}
		seen[s.Spec.ClusterIp] = s.Metadata.Name
	}
	if held, _ := ipalloc.Allocated(ctx, st); len(held) != 14 || len(seen) != 14 {
		t.Fatalf("%d reservations, %d services, want 14", len(held), len(seen))
	}
}

func TestDeleteReleases(t *testing.T) {
	ctx := context.Background()
	a, st := newAlloc(t, "10.96.0.0/16")
	s := svc("a", "10.96.0.10")
	if _, err := a.Create(ctx, st, s); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Delete(ctx, st, s); err != nil {
		t.Fatal(err)
	}
	if held, _ := ipalloc.Allocated(ctx, st); len(held) != 0 {
		t.Fatalf("reservations after delete: %v", held)
	}
	if _, err := a.Create(ctx, st, svc("b", "10.96.0.10")); err != nil {
		t.Fatalf("released IP not reusable: %v", err)
	}
}

func TestUpdate(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		old     *corev1.Service // created first
		update  func(*corev1.Service)
		wantIP  string
		wantErr error
		held    int
	}{
		{name: "empty carries forward", old: svc("a", "10.96.0.10"), update: func(s *corev1.Service) { s.Spec.ClusterIp, s.Spec.ClusterIps = "", nil },
			wantIP: "10.96.0.10", held: 1},
		{name: "same IP", old: svc("a", "10.96.0.10"), update: func(s *corev1.Service) {}, wantIP: "10.96.0.10", held: 1},
		{name: "change refused", old: svc("a", "10.96.0.10"), update: func(s *corev1.Service) { s.Spec.ClusterIp, s.Spec.ClusterIps = "10.96.0.11", nil },
			wantErr: ipalloc.ErrImmutable},
		{name: "to headless refused", old: svc("a", "10.96.0.10"), update: func(s *corev1.Service) { s.Spec.ClusterIp, s.Spec.ClusterIps = "None", nil },
			wantErr: ipalloc.ErrImmutable},
		{name: "headless stays headless", old: svc("a", "None"), update: func(s *corev1.Service) { s.Spec.ClusterIp, s.Spec.ClusterIps = "", nil },
			wantIP: "None", held: 0},
		{name: "to ExternalName releases", old: svc("a", "10.96.0.10"), update: func(s *corev1.Service) {
			s.Spec.Type, s.Spec.ClusterIp, s.Spec.ClusterIps = "ExternalName", "", nil
		}, wantIP: "", held: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, st := newAlloc(t, "10.96.0.0/16")
			if _, err := a.Create(ctx, st, tc.old); err != nil {
				t.Fatal(err)
			}
			old, err := objects.Get[*corev1.Service](ctx, st, "default", "a")
			if err != nil {
				t.Fatal(err)
			}
			next := svc("a", old.Spec.ClusterIp, old.Spec.ClusterIps...)
			tc.update(next)
			_, err = a.Update(ctx, st, old, next)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Update = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, _ := objects.Get[*corev1.Service](ctx, st, "default", "a")
			if got.Spec.ClusterIp != tc.wantIP {
				t.Fatalf("clusterIP %q, want %q", got.Spec.ClusterIp, tc.wantIP)
			}
			if held, _ := ipalloc.Allocated(ctx, st); len(held) != tc.held {
				t.Fatalf("reservations %v, want %d", held, tc.held)
			}
		})
	}
}

// TestUpdateAllocatesForUnallocated: a Service stored before allocation
// existed (no clusterIP) gets one on its next update.
func TestUpdateAllocatesForUnallocated(t *testing.T) {
	ctx := context.Background()
	a, st := newAlloc(t, "10.96.0.0/16")
	old := svc("a", "")
	if _, err := st.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	next := svc("a", "")
	if _, err := a.Update(ctx, st, old, next); err != nil {
		t.Fatal(err)
	}
	if next.Spec.ClusterIp == "" || next.Spec.ClusterIp == ipalloc.None {
		t.Fatalf("clusterIP %q after update", next.Spec.ClusterIp)
	}
	if held, _ := ipalloc.Allocated(ctx, st); held[next.Spec.ClusterIp] != "default/a" {
		t.Fatalf("reservations %v", held)
	}
}

// TestReservationIsAnIPAddress: a ClusterIP's reservation is the
// networking.k8s.io/v1 IPAddress kube-apiserver's allocator writes, read
// back through the IPAddress kind.
func TestReservationIsAnIPAddress(t *testing.T) {
	ctx := context.Background()
	a, st := newAlloc(t, "10.96.0.0/16")
	if _, err := a.Create(ctx, st, svc("web", "10.96.0.10")); err != nil {
		t.Fatal(err)
	}
	obj, err := st.GetKind(ctx, objects.IPAddresses, "", "10.96.0.10")
	if err != nil {
		t.Fatal(err)
	}
	u := obj.(*corev1.Unstructured)
	md := u.GetMetadata()
	if u.GetApiVersion() != "networking.k8s.io/v1" || u.GetKind() != "IPAddress" || md.GetName() != "10.96.0.10" || md.GetUid() == "" ||
		md.GetCreationTimestamp() == nil || md.GetLabels()["ipaddress.kubernetes.io/managed-by"] != "ipallocator.k8s.io" ||
		string(u.GetContent()) != `{"spec":{"parentRef":{"resource":"services","namespace":"default","name":"web"}}}` {
		t.Fatalf("reservation %v", u)
	}
}
