package endpoints

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

// TestV1EndpointsAndMirroring: a Service with a selector gets core/v1
// Endpoints from the same pods as its slice (skip-mirror, as kube's
// endpoints controller writes them), even without a pod; a user's
// Endpoints for a Service without a selector are mirrored into a slice
// of the mirroring controller, updated and removed with them; a Service
// gone takes its Endpoints and mirrored slices with it, while Endpoints
// that no Service has and the stage did not write are left alone.
func TestV1EndpointsAndMirroring(t *testing.T) {
	app := map[string]string{"app": "web"}
	empty := svc(map[string]string{"app": "none"}, &corev1.ServicePort{Name: "http", Port: 80})
	empty.Metadata.Name = "empty"
	custom := svc(nil, &corev1.ServicePort{Name: "example", Port: 80})
	custom.Metadata.Name = "custom"
	userEps := func(ip string) *corev1.Endpoints {
		return &corev1.Endpoints{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "custom", Uid: "eps-uid", Labels: map[string]string{"team": "a"}},
			Subsets: []*corev1.EndpointSubset{{Addresses: []*corev1.EndpointAddress{{Ip: ip}}, Ports: []*corev1.EndpointsPort{{Port: 80, Protocol: "TCP"}}}}}
	}
	static := &corev1.Endpoints{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "testservice"},
		Subsets: []*corev1.EndpointSubset{{Addresses: []*corev1.EndpointAddress{{Ip: "10.0.0.24"}}}}}
	f := newFixture(t, svc(app, &corev1.ServicePort{Name: "http", Port: 80}), empty, custom, userEps("10.1.2.3"), static,
		reported(pod("a", "10.0.0.1", app, true, nil), 1))
	ctx := context.Background()
	if err := f.s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	eps, err := objects.Get[*corev1.Endpoints](ctx, f.env.Store, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	ss := eps.GetSubsets()
	if len(ss) != 1 || len(ss[0].GetAddresses()) != 1 || ss[0].GetAddresses()[0].GetIp() != "10.0.0.1" ||
		ss[0].GetAddresses()[0].GetTargetRef().GetName() != "a" || len(ss[0].GetPorts()) != 1 || ss[0].GetPorts()[0].GetPort() != 80 ||
		eps.GetMetadata().GetLabels()[LabelSkipMirror] != "true" {
		t.Fatalf("web's Endpoints: %v", eps)
	}
	if eps, err := objects.Get[*corev1.Endpoints](ctx, f.env.Store, "default", "empty"); err != nil || len(eps.GetSubsets()) != 0 {
		t.Fatalf("empty's Endpoints: %v, %v; want them, without a subset", eps, err)
	}

	mirrored := func() []*corev1.EndpointSlice {
		all, _, err := objects.List[*corev1.EndpointSlice](ctx, f.env.Store, "default")
		if err != nil {
			t.Fatal(err)
		}
		var out []*corev1.EndpointSlice
		for _, sl := range all {
			if sl.GetMetadata().GetLabels()[LabelServiceName] == "custom" {
				out = append(out, sl)
			}
		}
		return out
	}
	check := func(ip string) {
		t.Helper()
		got := mirrored()
		if len(got) != 1 || len(got[0].GetEndpoints()) != 1 || got[0].GetEndpoints()[0].GetAddresses()[0] != ip ||
			len(got[0].GetPorts()) != 1 || got[0].GetPorts()[0].GetPort() != 80 ||
			got[0].GetMetadata().GetLabels()[LabelManagedBy] != MirrorManagedBy || got[0].GetMetadata().GetLabels()["team"] != "a" {
			t.Fatalf("custom's slices: %v, want one mirroring %s:80", got, ip)
		}
	}
	check("10.1.2.3")

	cur, _ := objects.Get[*corev1.Endpoints](ctx, f.env.Store, "default", "custom")
	next := userEps("10.2.3.4")
	objects.SetRevision(next, objects.Revision(cur))
	if _, err := f.env.Store.Update(ctx, next); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	check("10.2.3.4")

	if _, err := f.env.Store.Delete(ctx, objects.Endpoints, "default", "custom", 0); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := mirrored(); len(got) != 0 {
		t.Fatalf("custom's slices after its Endpoints went: %v", got)
	}

	// web goes: its Endpoints go; testservice's, which no Service has
	// and the stage did not write, stay.
	if _, err := f.env.Store.Delete(ctx, objects.Services, "default", "web", 0); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, ok := f.s.services.Get("default", "web"); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the Service informer still has web")
		}
	}
	if err := f.s.syncKey(ctx, "default", "web", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := objects.Get[*corev1.Endpoints](ctx, f.env.Store, "default", "web"); !errors.Is(err, raftstore.ErrNotFound) {
		t.Fatalf("web's Endpoints after web went: %v", err)
	}
	if err := f.s.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := objects.Get[*corev1.Endpoints](ctx, f.env.Store, "default", "testservice"); err != nil {
		t.Fatalf("a user's Endpoints without a Service: %v, want them kept", err)
	}
}
