package storeclient_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	k8scorev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
	"github.com/podflow/podflow/services/storeclient"
)

func put(t *testing.T, st *objects.Store, k runtime.Object) objects.Object {
	t.Helper()
	m, err := manifest.FromKube(k)
	if err != nil {
		t.Fatal(err)
	}
	obj := m.(objects.Object)
	if _, err := st.Apply(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestInformersFollowTheStore: the typed informers of client-go list the
// store and follow its writes and deletes, also across a compaction of
// the store's history (410: the reflector lists again).
func TestInformersFollowTheStore(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	kv := objectstest.New()
	st := objects.FromKV(kv)
	put(t, st, &k8scorev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"team": "x"}}})
	put(t, st, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "inject"}})

	f := storeclient.New(st)
	nsLister := f.Core().V1().Namespaces().Lister()
	hooks := f.Admissionregistration().V1().MutatingWebhookConfigurations()
	var mu sync.Mutex
	var deleted []string
	if _, err := hooks.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: func(o any) {
		mu.Lock()
		deleted = append(deleted, o.(*admissionregistrationv1.MutatingWebhookConfiguration).Name)
		mu.Unlock()
	}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.StartWithContext(ctx)
	defer func() { cancel(); f.Shutdown() }()
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%v did not sync", typ)
		}
	}
	ns, err := nsLister.Get("a")
	if err != nil || ns.Labels["team"] != "x" || ns.ResourceVersion == "" {
		t.Fatalf("namespace a: %v %v", ns, err)
	}
	if _, err := hooks.Lister().Get("inject"); err != nil {
		t.Fatal(err)
	}

	put(t, st, &k8scorev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "b"}})
	eventually(t, "namespace b", func() bool { _, err := nsLister.Get("b"); return err == nil })
	if _, err := st.Delete(ctx, objects.Kinds()[indexOf(t, "MutatingWebhookConfiguration")], "", "inject", 0); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the delete", func() bool { _, err := hooks.Lister().Get("inject"); return apierrors.IsNotFound(err) })
	eventually(t, "the delete handler", func() bool { mu.Lock(); defer mu.Unlock(); return len(deleted) > 0 })
	mu.Lock()
	defer mu.Unlock()
	if len(deleted) != 1 || deleted[0] != "inject" {
		t.Fatalf("delete handler saw %v", deleted)
	}

	// The history is compacted under the watch: the informer lists again
	// and misses nothing.
	kv.Compact(kv.Revision())
	put(t, st, &k8scorev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "c"}})
	eventually(t, "namespace c after compaction", func() bool { _, err := nsLister.Get("c"); return err == nil })
	all, _ := nsLister.List(labels.Everything())
	if len(all) != 3 {
		t.Fatalf("namespaces: %d, want 3", len(all))
	}
}

func indexOf(t *testing.T, kind string) int {
	for i, k := range objects.Kinds() {
		if k.Name == kind {
			return i
		}
	}
	t.Fatalf("no kind %s", kind)
	return -1
}

// TestForResource: a kind with a Go type gets its typed informer; the
// lister of a namespaced kind lists by namespace.
func TestForResource(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	st := objects.FromKV(objectstest.New())
	put(t, st, &k8scorev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "n1"}, Data: map[string]string{"k": "v"}})
	put(t, st, &k8scorev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "n2"}})
	f := storeclient.New(st)
	gi, err := f.ForResource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ForResource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}); err == nil {
		t.Fatal("a resource the store does not keep has an informer")
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.StartWithContext(ctx)
	defer func() { cancel(); f.Shutdown() }()
	f.WaitForCacheSync(ctx.Done())
	obj, err := gi.Lister().ByNamespace("n1").Get("p")
	if err != nil {
		t.Fatal(err)
	}
	if cm := obj.(*k8scorev1.ConfigMap); cm.Data["k"] != "v" {
		t.Fatalf("configmap n1/p: %v", cm)
	}
	if l, _ := gi.Lister().ByNamespace("n2").List(labels.Everything()); len(l) != 1 {
		t.Fatalf("n2 lists %d configmaps", len(l))
	}
}

// TestClientsGetOnly: the clientset and the dynamic client read the store
// and refuse every write.
func TestClientsGetOnly(t *testing.T) {
	ctx := context.Background()
	st := objects.FromKV(objectstest.New())
	put(t, st, &k8scorev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "a"}})
	put(t, st, &k8scorev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "a"}, Data: map[string]string{"k": "v"}})
	cs, err := storeclient.Clientset(st)
	if err != nil {
		t.Fatal(err)
	}
	if ns, err := cs.CoreV1().Namespaces().Get(ctx, "a", metav1.GetOptions{}); err != nil || ns.Name != "a" {
		t.Fatalf("get namespace: %v %v", ns, err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "missing", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get a missing namespace: %v", err)
	}
	if l, err := cs.CoreV1().ConfigMaps("a").List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 1 || l.Items[0].Data["k"] != "v" {
		t.Fatalf("list configmaps: %v %v", l, err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &k8scorev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); !apierrors.IsMethodNotSupported(err) {
		t.Fatalf("create through the read-only client: %v", err)
	}
	if _, err := objects.Get[*corev1.Namespace](ctx, st, "", "x"); err == nil {
		t.Fatal("the refused create was stored")
	}
	dyn, err := storeclient.Dynamic(st)
	if err != nil {
		t.Fatal(err)
	}
	u, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("a").Get(ctx, "p", metav1.GetOptions{})
	if err != nil || u.Object["data"].(map[string]any)["k"] != "v" {
		t.Fatalf("dynamic get: %v %v", u, err)
	}
	if err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("a").Delete(ctx, "p", metav1.DeleteOptions{}); !apierrors.IsMethodNotSupported(err) {
		t.Fatalf("delete through the read-only client: %v", err)
	}
}

// TestRESTMapper maps the stored kinds, irregular plurals included.
func TestRESTMapper(t *testing.T) {
	m := storeclient.NewRESTMapper()
	mp, err := m.RESTMapping(schema.GroupKind{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}, "v1")
	if err != nil {
		t.Fatal(err)
	}
	if mp.Resource.Resource != "validatingadmissionpolicies" || mp.Scope.Name() != meta.RESTScopeNameRoot {
		t.Fatalf("mapping: %+v", mp)
	}
	gvk, err := m.KindFor(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	if err != nil || gvk.Kind != "ConfigMap" {
		t.Fatalf("configmaps: %v %v", gvk, err)
	}
}
