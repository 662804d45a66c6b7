package kubernetesservice

import (
	"context"
	"encoding/json"
	"net/netip"
	"sync"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/objects"
)

func readServiceCIDR(t *testing.T, st *objects.Store) (*corev1.Unstructured, serviceCIDR) {
	t.Helper()
	obj, err := st.GetKind(context.Background(), objects.ServiceCIDRs, "", DefaultServiceCIDRName)
	if err != nil {
		t.Fatalf("the default ServiceCIDR: %v", err)
	}
	u := obj.(*corev1.Unstructured)
	var c serviceCIDR
	if err := json.Unmarshal(u.GetContent(), &c); err != nil {
		t.Fatal(err)
	}
	return u, c
}

// TestDefaultServiceCIDR: the api replicas keep the ServiceCIDR
// "kubernetes" as kube-apiserver's default-servicecidr controller does
// (the conformance test "should support ServiceCIDR API operations" gets
// it by that name): created once with the service CIDR and Ready, created
// again when deleted, made Ready when its Ready condition is missing
// (other content kept), and left alone when its CIDRs differ.
func TestDefaultServiceCIDR(t *testing.T) {
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
	u, sc := readServiceCIDR(t, st)
	if len(sc.Spec.CIDRs) != 1 || sc.Spec.CIDRs[0] != "10.96.0.0/16" || len(sc.Status.Conditions) != 1 ||
		sc.Status.Conditions[0].Type != "Ready" || sc.Status.Conditions[0].Status != "True" ||
		sc.Status.Conditions[0].Message != ServiceCIDRReadyMessage || u.GetMetadata().GetUid() == "" {
		t.Fatalf("default ServiceCIDR %s %s", u.GetMetadata(), u.GetContent())
	}

	// Deleted: created again by the next pass.
	if _, err := st.Delete(ctx, objects.ServiceCIDRs, "", DefaultServiceCIDRName, 0); err != nil {
		t.Fatal(err)
	}
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	readServiceCIDR(t, st)

	// No Ready condition: made Ready, another condition and field kept.
	u, _ = readServiceCIDR(t, st)
	u.Content = []byte(`{"spec":{"cidrs":["10.96.0.0/16"]},"status":{"conditions":[{"type":"Other","status":"True","lastTransitionTime":"2026-01-01T00:00:00Z","reason":"R","message":""}]},"extra":{"a":1}}`)
	if _, err := st.Update(ctx, u); err != nil {
		t.Fatal(err)
	}
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	u, sc = readServiceCIDR(t, st)
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(u.GetContent(), &raw)
	if len(sc.Status.Conditions) != 2 || sc.Status.Conditions[0].Type != "Other" || sc.Status.Conditions[1].Type != "Ready" ||
		sc.Status.Conditions[1].Status != "True" || string(raw["extra"]) != `{"a":1}` {
		t.Fatalf("after the pass: %s", u.GetContent())
	}

	// Other CIDRs: left alone, not Ready'd.
	u.Content = []byte(`{"spec":{"cidrs":["10.0.0.0/24"]},"status":{}}`)
	if _, err := st.Update(ctx, u); err != nil {
		t.Fatal(err)
	}
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if u, sc = readServiceCIDR(t, st); len(sc.Status.Conditions) != 0 {
		t.Fatalf("a ServiceCIDR of other CIDRs was changed: %s", u.GetContent())
	}
}
