package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apiextensions-apiserver/pkg/apihelpers"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

var cronTabsGVR = schema.GroupVersionResource{Group: "stable.example.com", Version: "v1", Resource: "crontabs"}

// cronTabsCRD is services/crd's test definition: two versions (v1
// stored), defaults, a CEL rule, status and scale subresources, printer
// columns, a selectable field.
func cronTabsCRD(t testing.TB) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	b, err := os.ReadFile("../crd/testdata/crontabs.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(b, c); err != nil {
		t.Fatal(err)
	}
	return c
}

// establish creates def through client-go and waits until it is
// Established and its first served version is in discovery.
func establish(t testing.TB, s *system, def *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ac, err := apiextensionsclient.NewForConfig(restConfig(s))
	if err != nil {
		t.Fatal(err)
	}
	created, err := ac.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, def, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s: %v", def.Name, err)
	}
	for {
		got, err := ac.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, def.Name, metav1.GetOptions{})
		if err == nil && apihelpers.IsCRDConditionTrue(got, apiextensionsv1.Established) {
			return got
		}
		if ctx.Err() != nil {
			t.Fatalf("%s not established: %v %+v", def.Name, err, created.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCustomResourceLifecycle: a definition is named and established;
// its objects are served as kube-apiserver serves them — defaults and
// pruning, a CEL rule's message, status through /status only, the other
// version converted, printer columns, selectable fields, strategic
// merge patches refused — and deleting it deletes its objects.
func TestCustomResourceLifecycle(t *testing.T) {
	s := startSystem(t, options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	def := establish(t, s, cronTabsCRD(t))
	if c := apihelpers.FindCRDCondition(def, apiextensionsv1.NamesAccepted); c == nil || c.Reason != "NoConflicts" {
		t.Fatalf("NamesAccepted %+v", c)
	}
	if len(def.Finalizers) != 0 {
		t.Fatalf("a new definition has finalizers %v", def.Finalizers)
	}

	dc, err := discovery.NewDiscoveryClientForConfig(restConfig(s))
	if err != nil {
		t.Fatal(err)
	}
	rl, err := dc.ServerResourcesForGroupVersion("stable.example.com/v1")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, r := range rl.APIResources {
		found = append(found, r.Name)
		if r.Name == "crontabs" && (strings.Join(r.ShortNames, ",") != "ct" || strings.Join(r.Categories, ",") != "all,batch-like" ||
			r.Kind != "CronTab" || r.SingularName != "crontab" || !r.Namespaced) {
			t.Errorf("discovery of crontabs: %+v", r)
		}
	}
	if strings.Join(found, ",") != "crontabs,crontabs/status,crontabs/scale" {
		t.Errorf("stable.example.com/v1 resources %v", found)
	}
	groups, err := dc.ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	var versions []string
	for _, g := range groups.Groups {
		if g.Name == "stable.example.com" {
			for _, v := range g.Versions {
				versions = append(versions, v.Version)
			}
			if g.PreferredVersion.Version != "v2" {
				t.Errorf("preferred version %s, want v2 (kube-aware order)", g.PreferredVersion.Version)
			}
		}
	}
	if strings.Join(versions, ",") != "v2,v1" {
		t.Errorf("group versions %v", versions)
	}

	dyn, err := dynamic.NewForConfig(restConfig(s))
	if err != nil {
		t.Fatal(err)
	}
	tabs := dyn.Resource(cronTabsGVR).Namespace("default")
	obj := unstructuredOf(t, `apiVersion: stable.example.com/v1
kind: CronTab
metadata: {name: nightly}
spec: {cronSpec: "0 3 * * *", image: backup, replicas: 2, unknownField: x}
status: {replicas: 5}
`)
	created, err := tabs.Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(created.Object, "spec", "unknownField"); found {
		t.Error("spec.unknownField was not pruned")
	}
	if c, _, _ := unstructured.NestedString(created.Object, "spec", "color"); c != "blue" {
		t.Errorf("spec.color %q, want the default blue", c)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(created.Object, "status"); found || created.GetGeneration() != 1 {
		t.Errorf("created with status %v, generation %d", created.Object["status"], created.GetGeneration())
	}

	// A CEL rule refuses, with its message.
	bad := unstructuredOf(t, "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata: {name: bad}\nspec: {replicas: 1, minReplicas: 3}\n")
	_, err = tabs.Create(ctx, bad, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec: Invalid value: replicas must be at least minReplicas") {
		t.Fatalf("CEL violation: %v", err)
	}

	// Status only through /status; the object's update keeps it.
	created.Object["status"] = map[string]any{"replicas": int64(2), "lastRun": "now"}
	_ = unstructured.SetNestedField(created.Object, "sneaky", "spec", "image")
	st, err := tabs.UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if img, _, _ := unstructured.NestedString(st.Object, "spec", "image"); img != "backup" || st.GetGeneration() != 1 {
		t.Errorf("a status update changed spec.image to %q, generation %d", img, st.GetGeneration())
	}
	if r, _, _ := unstructured.NestedInt64(st.Object, "status", "replicas"); r != 2 {
		t.Errorf("status.replicas %d", r)
	}

	// Scale: the replicas paths, and kubectl scale's write.
	sc, err := tabs.Get(ctx, "nightly", metav1.GetOptions{}, "scale")
	if err != nil {
		t.Fatal(err)
	}
	if r, _, _ := unstructured.NestedInt64(sc.Object, "spec", "replicas"); r != 2 || sc.GetKind() != "Scale" {
		t.Fatalf("scale %v", sc.Object)
	}
	if _, err := tabs.Patch(ctx, "nightly", types.MergePatchType, []byte(`{"spec":{"replicas":4}}`), metav1.PatchOptions{}, "scale"); err != nil {
		t.Fatal(err)
	}

	// The other version, converted (None) and with its own default.
	v2, err := dyn.Resource(cronTabsGVR.GroupVersion().WithResource("crontabs")).Namespace("default").Get(ctx, "nightly", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v2tabs := dyn.Resource(schema.GroupVersionResource{Group: "stable.example.com", Version: "v2", Resource: "crontabs"}).Namespace("default")
	got2, err := v2tabs.Get(ctx, "nightly", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got2.GetAPIVersion() != "stable.example.com/v2" {
		t.Errorf("v2 read as %s", got2.GetAPIVersion())
	}
	if r, _, _ := unstructured.NestedInt64(v2.Object, "spec", "replicas"); r != 4 {
		t.Errorf("replicas after the scale patch %d", r)
	}

	// Strategic merge patches are kube-apiserver's 415 for custom resources.
	_, err = tabs.Patch(ctx, "nightly", types.StrategicMergePatchType, []byte(`{"spec":{"image":"x"}}`), metav1.PatchOptions{})
	const smp = "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
	if !apierrors.IsUnsupportedMediaType(err) || !strings.Contains(err.Error(), smp) {
		t.Fatalf("strategic merge patch: %v", err)
	}

	// Field selectors: the selectable field (with its default), metadata;
	// anything else refused.
	l, err := tabs.List(ctx, metav1.ListOptions{FieldSelector: "spec.color=blue"})
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("spec.color=blue: %v %v", l, err)
	}
	if l, err := tabs.List(ctx, metav1.ListOptions{FieldSelector: "spec.color=red"}); err != nil || len(l.Items) != 0 {
		t.Fatalf("spec.color=red: %v %v", l, err)
	}
	if _, err := tabs.List(ctx, metav1.ListOptions{FieldSelector: "spec.image=backup"}); !apierrors.IsBadRequest(err) ||
		!strings.Contains(err.Error(), "field label not supported: spec.image") {
		t.Fatalf("spec.image selector: %v", err)
	}

	// kubectl get's table: the printer columns.
	code, table, _ := do(t, s.client(t, adminToken), "GET", s.url+"/apis/stable.example.com/v1/namespaces/default/crontabs", "", "",
		"Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	var cols []string
	for _, c := range table["columnDefinitions"].([]any) {
		cols = append(cols, c.(map[string]any)["name"].(string))
	}
	rows, _ := table["rows"].([]any)
	if code != 200 || strings.Join(cols, ",") != "Name,Spec,Replicas,Age" || len(rows) != 1 {
		t.Fatalf("table %d %v %v", code, cols, table)
	}
	if cells := rows[0].(map[string]any)["cells"].([]any); cells[1] != "0 3 * * *" || cells[2] != float64(4) {
		t.Errorf("cells %v", cells)
	}

	// Deleting the definition deletes its objects, then itself.
	ac, err := apiextensionsclient.NewForConfig(restConfig(s))
	if err != nil {
		t.Fatal(err)
	}
	if err := ac.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, def.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		_, err := ac.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, def.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the definition is still there: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := s.store.KV().Get(ctx, "/registry/stable.example.com/crontabs/default/nightly"); err == nil {
		t.Error("the object outlived its definition")
	}
	// The front door learns of the deletion from the store's watch, as
	// kube-apiserver's CRD handler from its informer: not at once.
	for {
		_, err := tabs.List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("list after the definition went: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestCustomResourceWatchAndPaging: a list pages over one snapshot, and a
// watch from its resourceVersion sees every later change, in the version
// it asked for.
func TestCustomResourceWatchAndPaging(t *testing.T) {
	s := startSystem(t, options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	establish(t, s, cronTabsCRD(t))
	dyn, err := dynamic.NewForConfig(restConfig(s))
	if err != nil {
		t.Fatal(err)
	}
	tabs := dyn.Resource(cronTabsGVR).Namespace("default")
	const n = 250
	objs := make([]*unstructured.Unstructured, n)
	for i := range objs {
		objs[i] = unstructuredOf(t, fmt.Sprintf("apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata: {name: t%03d}\nspec: {image: x}\n", i))
	}
	// 8 writers: each create waits on the pipeline, not on the CPU.
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				if _, err := tabs.Create(ctx, objs[i], metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("create t%03d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var names []string
	opts := metav1.ListOptions{Limit: 100}
	var rv string
	for {
		l, err := tabs.List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if rv == "" {
			rv = l.GetResourceVersion()
		}
		for _, it := range l.Items {
			names = append(names, it.GetName())
		}
		if l.GetContinue() == "" {
			break
		}
		opts.Continue = l.GetContinue()
	}
	if len(names) != n || names[0] != "t000" || names[n-1] != fmt.Sprintf("t%03d", n-1) {
		t.Fatalf("paged %d names: %v...", len(names), names[:3])
	}
	v2 := dyn.Resource(schema.GroupVersionResource{Group: "stable.example.com", Version: "v2", Resource: "crontabs"}).Namespace("default")
	w, err := v2.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	patch := []byte(`{"spec":{"image":"y"}}`)
	if _, err := tabs.Patch(ctx, "t007", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := tabs.Delete(ctx, "t008", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for len(seen) < 2 {
		select {
		case ev := <-w.ResultChan():
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				t.Fatalf("watch event %v", ev)
			}
			if u.GetAPIVersion() != "stable.example.com/v2" {
				t.Errorf("watched in %s", u.GetAPIVersion())
			}
			seen = append(seen, string(ev.Type)+" "+u.GetName())
		case <-ctx.Done():
			t.Fatalf("watch saw %v", seen)
		}
	}
	if strings.Join(seen, ",") != string(watch.Modified)+" t007,"+string(watch.Deleted)+" t008" {
		t.Errorf("watch events %v", seen)
	}
	_ = json.Marshal
}

// TestCustomResourceRBACAndNamespaces: custom resources are authorized by
// their group and resource as any kind (a user without a role is 403, a
// Role on crontabs of stable.example.com lets her read them, not write
// them, and not read another group's), and a deleted namespace takes its
// custom resources with it.
func TestCustomResourceRBACAndNamespaces(t *testing.T) {
	s := startSystem(t, options{})
	establish(t, s, cronTabsCRD(t))
	admin, alice := s.client(t, adminToken), s.client(t, aliceToken)
	tabs := s.url + "/apis/stable.example.com/v1/namespaces/team/crontabs"
	if code, out, _ := do(t, admin, "POST", s.url+"/api/v1/namespaces", "application/json", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team"}}`); code != 201 {
		t.Fatalf("namespace: %d %v", code, out)
	}
	tab := `{"apiVersion":"stable.example.com/v1","kind":"CronTab","metadata":{"name":"t"},"spec":{"image":"x"}}`
	if code, out, _ := do(t, admin, "POST", tabs, "application/json", tab); code != 201 {
		t.Fatalf("create: %d %v", code, out)
	}
	code, out, _ := do(t, alice, "GET", tabs, "", "")
	if msg, _ := out["message"].(string); code != 403 || !strings.Contains(msg, `crontabs.stable.example.com is forbidden: User "alice" cannot list resource "crontabs" in API group "stable.example.com" in the namespace "team"`) {
		t.Fatalf("alice without a role: %d %v", code, out)
	}
	role := `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"tab-reader"},
"rules":[{"apiGroups":["stable.example.com"],"resources":["crontabs"],"verbs":["get","list","watch"]}]}`
	binding := `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"alice-reads-tabs"},
"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"Role","name":"tab-reader"},"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"alice"}]}`
	for p, b := range map[string]string{"roles": role, "rolebindings": binding} {
		if code, out, _ := do(t, admin, "POST", s.url+"/apis/rbac.authorization.k8s.io/v1/namespaces/team/"+p, "application/json", b); code != 201 {
			t.Fatalf("%s: %d %v", p, code, out)
		}
	}
	deadline := time.Now().Add(10 * time.Second) // the RBAC cache follows the store
	for {
		code, out, _ = do(t, alice, "GET", tabs, "", "")
		if code == 200 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code != 200 || len(out["items"].([]any)) != 1 {
		t.Fatalf("alice with the role: %d %v", code, out)
	}
	if code, out, _ := do(t, alice, "DELETE", tabs+"/t", "", ""); code != 403 {
		t.Fatalf("alice deletes: %d %v", code, out)
	}
	if code, _, _ := do(t, alice, "GET", s.url+"/apis/apps/v1/namespaces/team/deployments", "", ""); code != 403 {
		t.Fatalf("alice reads another group: %d", code)
	}

	// The namespace goes, and its custom resources with it.
	if code, out, _ := do(t, admin, "DELETE", s.url+"/api/v1/namespaces/team", "", ""); code != 200 {
		t.Fatalf("delete the namespace: %d %v", code, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		if _, err := s.store.KV().Get(ctx, "/registry/namespaces/team"); err != nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the namespace was not removed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if v := storedValue(ctx, s, "/registry/stable.example.com/crontabs/team/t"); v != "" {
		t.Fatal("the custom resource outlived its namespace")
	}
}
