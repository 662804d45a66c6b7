package apiserver_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestEndpointsLifecycle: core/v1 Endpoints are a stored kind, as
// kube-apiserver serves them — created, watched, listed across
// namespaces by label, updated, patched (strategic merge), deleted by
// collection — the steps of the conformance test "should test the
// lifecycle of an Endpoint"; an invalid one is refused with
// kube-apiserver's message.
func TestEndpointsLifecycle(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: s.url, BearerToken: adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.ca.CertPEM}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eps := cs.CoreV1().Endpoints("default")
	w, err := eps.Watch(ctx, metav1.ListOptions{LabelSelector: "test-endpoint-static=true"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	next := func(want watch.EventType) *k8scorev1.Endpoints {
		t.Helper()
		select {
		case ev := <-w.ResultChan():
			if ev.Type != want {
				t.Fatalf("watch event %s %v, want %s", ev.Type, ev.Object, want)
			}
			return ev.Object.(*k8scorev1.Endpoints)
		case <-ctx.Done():
			t.Fatalf("no %s event", want)
		}
		return nil
	}
	created, err := eps.Create(ctx, &k8scorev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: "testservice", Labels: map[string]string{"test-endpoint-static": "true"}},
		Subsets: []k8scorev1.EndpointSubset{{Addresses: []k8scorev1.EndpointAddress{{IP: "10.0.0.24"}},
			Ports: []k8scorev1.EndpointPort{{Name: "http", Port: 80, Protocol: k8scorev1.ProtocolTCP}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	next(watch.Added)
	list, err := cs.CoreV1().Endpoints("").List(ctx, metav1.ListOptions{LabelSelector: "test-endpoint-static=true"})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "testservice" {
		t.Fatalf("list across namespaces: %v, %v", list, err)
	}
	created.Labels["test-service"] = "updated"
	if _, err := eps.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	next(watch.Modified)
	patch, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"labels": map[string]string{"test-service": "patched"}},
		"subsets":  []map[string]any{{"addresses": []map[string]string{{"ip": "10.0.0.25"}}, "ports": []map[string]any{{"name": "http-test", "port": 8080}}}},
	})
	if _, err := eps.Patch(ctx, "testservice", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	next(watch.Modified)
	got, err := eps.Get(ctx, "testservice", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels["test-service"] != "patched" || got.Subsets[0].Addresses[0].IP != "10.0.0.25" ||
		got.Subsets[0].Ports[0].Name != "http-test" || got.Subsets[0].Ports[0].Port != 8080 || got.Subsets[0].Ports[0].Protocol != "TCP" {
		t.Fatalf("patched Endpoints: %+v", got)
	}
	if err := eps.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "test-endpoint-static=true"}); err != nil {
		t.Fatal(err)
	}
	next(watch.Deleted)

	_, err = eps.Create(ctx, &k8scorev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "bad"},
		Subsets: []k8scorev1.EndpointSubset{{Addresses: []k8scorev1.EndpointAddress{{IP: "127.0.0.1"}}}}}, metav1.CreateOptions{})
	want := `Endpoints "bad" is invalid: subsets[0].addresses[0].ip: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)`
	if !apierrors.IsInvalid(err) || err.Error() != want {
		t.Fatalf("a loopback address: %v\nwant %s", err, want)
	}
}

// TestServiceTableExternalIP: kubectl get svc's EXTERNAL-IP is an
// ExternalName Service's name and a LoadBalancer's <pending>, as
// kube-apiserver's printer says.
func TestServiceTableExternalIP(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	for _, body := range []string{
		`{"apiVersion":"v1","kind":"Service","metadata":{"name":"ext"},"spec":{"type":"ExternalName","externalName":"db.example.com"}}`,
		`{"apiVersion":"v1","kind":"Service","metadata":{"name":"lb"},"spec":{"type":"LoadBalancer","ports":[{"port":80}]}}`,
	} {
		if code, resp, _ := do(t, admin, "POST", s.url+"/api/v1/namespaces/default/services", "application/json", body); code != 201 {
			t.Fatalf("create: %d %v", code, resp)
		}
	}
	code, tbl, _ := do(t, admin, "GET", s.url+"/api/v1/namespaces/default/services", "", "", "Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	if code != 200 {
		t.Fatalf("table: %d %v", code, tbl)
	}
	got := map[string]any{}
	for _, r := range tbl["rows"].([]any) {
		cells := r.(map[string]any)["cells"].([]any)
		got[cells[0].(string)] = cells[3]
	}
	if got["ext"] != "db.example.com" || got["lb"] != "<pending>" {
		t.Fatalf("EXTERNAL-IP cells %v", got)
	}
}
