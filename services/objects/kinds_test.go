package objects_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
)

// TestGenericKindStored: a generic kind's object is an Unstructured with
// its apiVersion and kind, stored under kube-apiserver's etcd key, and
// comes back whole.
func TestGenericKindStored(t *testing.T) {
	st := objects.FromKV(objectstest.New())
	d := objects.Deployments.New().(*corev1.Unstructured)
	if d.GetApiVersion() != "apps/v1" || d.GetKind() != "Deployment" {
		t.Fatalf("New: %s %s, want apps/v1 Deployment", d.GetApiVersion(), d.GetKind())
	}
	d.Metadata = &corev1.ObjectMeta{Namespace: "ns", Name: "web", Labels: map[string]string{"app": "web"}}
	d.Content = []byte(`{"spec":{"replicas":2}}`)
	if key, err := objects.KeyOf(d); err != nil || key != "/registry/deployments/ns/web" {
		t.Fatalf("KeyOf = %q, %v", key, err)
	}
	if _, err := st.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetKind(ctx, objects.Deployments, "ns", "web")
	if err != nil {
		t.Fatal(err)
	}
	u := got.(*corev1.Unstructured)
	if string(u.GetContent()) != `{"spec":{"replicas":2}}` || u.GetMetadata().GetLabels()["app"] != "web" || u.GetKind() != "Deployment" {
		t.Fatalf("read back %v", u)
	}
	// Another kind of the same message under its own key.
	rc := objects.ReplicationControllers.New()
	rc.(*corev1.Unstructured).Metadata = &corev1.ObjectMeta{Namespace: "ns", Name: "web"}
	if key, _ := objects.KeyOf(rc); key != "/registry/controllers/ns/web" {
		t.Fatalf("ReplicationController key %q", key)
	}
}

// TestKindOfUnstructured resolves by the apiVersion's group and the kind,
// whatever the version, and refuses what is not registered.
func TestKindOfUnstructured(t *testing.T) {
	for _, tc := range []struct {
		apiVersion, kind string
		want             string
	}{
		{"apps/v1", "Deployment", "deployments.apps"},
		{"apps/v1beta2", "Deployment", "deployments.apps"},
		{"v1", "ReplicationController", "replicationcontrollers"},
		{"networking.k8s.io/v1", "Ingress", "ingresses.networking.k8s.io"},
		{"extensions/v1beta1", "Deployment", ""},
		{"v1", "Deployment", ""},
		{"apps/v1", "Nope", ""},
	} {
		k, err := objects.KindOf(&corev1.Unstructured{ApiVersion: tc.apiVersion, Kind: tc.kind})
		if tc.want == "" {
			if !errors.Is(err, objects.ErrUnknownKind) {
				t.Errorf("%s %s: %v, want ErrUnknownKind", tc.apiVersion, tc.kind, err)
			}
			continue
		}
		if err != nil || k.Qualified() != tc.want || !k.Generic {
			t.Errorf("%s %s: %s generic=%v %v, want %s", tc.apiVersion, tc.kind, k.Qualified(), k.Generic, err, tc.want)
		}
	}
}

// TestKindForResource: kubectl's spellings of a resource, qualified or
// not, for proto kinds and generic ones.
func TestKindForResource(t *testing.T) {
	for in, want := range map[string]string{
		"pods": "pods", "po": "pods", "Pod": "pods", "pod": "pods",
		"deployments": "deployments.apps", "deploy": "deployments.apps", "Deployment": "deployments.apps",
		"deployments.apps": "deployments.apps", "deploy.apps": "deployments.apps", "deployment.apps": "deployments.apps",
		"rc": "replicationcontrollers", "pvc": "persistentvolumeclaims", "crd": "customresourcedefinitions.apiextensions.k8s.io",
		"ingress": "ingresses.networking.k8s.io", "ing": "ingresses.networking.k8s.io", "pc": "priorityclasses.scheduling.k8s.io",
		"cm": "configmaps", "ep": "endpointslices.discovery.k8s.io", "csr": "certificatesigningrequests.certificates.k8s.io",
	} {
		k, err := objects.KindForResource(in)
		if err != nil || k.Qualified() != want {
			t.Errorf("KindForResource(%q) = %s, %v; want %s", in, k.Qualified(), err, want)
		}
	}
	for _, bad := range []string{"deployments.batch", "nope", "pods.apps"} {
		if _, err := objects.KindForResource(bad); !errors.Is(err, objects.ErrUnknownKind) {
			t.Errorf("KindForResource(%q): %v, want ErrUnknownKind", bad, err)
		}
	}
}

// TestRegisterRefuses what would make two kinds share keys or names.
func TestRegisterRefuses(t *testing.T) {
	for name, g := range map[string]objects.GenericKind{
		"same resource":      {Group: "apps", Version: "v1", Kind: "Other", Resource: "deployments", Prefix: "/registry/test.io/a/"},
		"same kind":          {Group: "apps", Version: "v1", Kind: "Deployment", Resource: "others", Prefix: "/registry/test.io/b/"},
		"prefix inside":      {Group: "test.io", Version: "v1", Kind: "A", Resource: "as", Prefix: "/registry/deployments/a/"},
		"prefix around":      {Group: "test.io", Version: "v1", Kind: "B", Resource: "bs", Prefix: "/registry/"},
		"prefix not ending":  {Group: "test.io", Version: "v1", Kind: "C", Resource: "cs", Prefix: "/registry/cs"},
		"prefix elsewhere":   {Group: "test.io", Version: "v1", Kind: "D", Resource: "ds", Prefix: "/other/ds/"},
		"upper case":         {Group: "test.io", Version: "v1", Kind: "E", Resource: "Es", Prefix: "/registry/test.io/es/"},
		"no version":         {Group: "test.io", Kind: "F", Resource: "fs", Prefix: "/registry/test.io/fs/"},
		"pods' prefix again": {Group: "test.io", Version: "v1", Kind: "G", Resource: "gs", Prefix: "/registry/pods/"},
	} {
		if _, err := objects.Register(g); !errors.Is(err, objects.ErrInvalid) {
			t.Errorf("%s: Register = %v, want ErrInvalid", name, err)
		}
	}
}

// TestRegisterConcurrent registers kinds at run time while others look
// kinds up (run with -race): each is found once registered, and Kinds
// and Generation grow by as many.
func TestRegisterConcurrent(t *testing.T) {
	before, gen := len(objects.Kinds()), objects.Generation()
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			res := fmt.Sprintf("widgets%d", i)
			k, err := objects.Register(objects.GenericKind{Group: "concurrent.test.io", Version: "v1", Kind: fmt.Sprintf("Widget%d", i),
				Resource: res, Namespaced: true, Prefix: "/registry/concurrent.test.io/" + res + "/"})
			if err != nil {
				t.Error(err)
				return
			}
			u := k.New().(*corev1.Unstructured)
			if got, err := objects.KindOf(u); err != nil || got.Resource != res {
				t.Errorf("KindOf(%s) = %s, %v", u.GetKind(), got.Resource, err)
			}
		}()
		go func() {
			defer wg.Done()
			_, _ = objects.KindForResource("widgets0.concurrent.test.io")
			for _, k := range objects.Kinds() {
				_ = k.Prefix("")
			}
		}()
	}
	wg.Wait()
	if got := len(objects.Kinds()); got != before+n {
		t.Fatalf("Kinds: %d, want %d", got, before+n)
	}
	if objects.Generation() != gen+n {
		t.Fatalf("Generation moved by %d, want %d", objects.Generation()-gen, n)
	}
	if k, err := objects.KindForResource("widgets7.concurrent.test.io"); err != nil || !strings.HasSuffix(k.Prefix("ns"), "/widgets7/ns/") {
		t.Fatalf("widgets7: %s %v", k.Prefix("ns"), err)
	}
}

// TestReplaceAndUnregister: a kind registered by Replace changes with a
// new Replace (its version, names and subresources) and goes with
// Unregister, its resource and short names with it; a built-in kind is
// neither replaced nor removed.
func TestReplaceAndUnregister(t *testing.T) {
	g := objects.GenericKind{Group: "replace.test.io", Version: "v1", Kind: "Gadget", Resource: "gadgets", Namespaced: true,
		Prefix: objects.CustomResourcePrefix("replace.test.io", "gadgets"), ShortNames: []string{"gdg"}}
	k, err := objects.Replace(g)
	if err != nil || !k.Replaceable() {
		t.Fatalf("Replace: %v %v", k, err)
	}
	if got, err := objects.KindForResource("gdg"); err != nil || got.Name != "Gadget" {
		t.Fatalf("short name: %v %v", got, err)
	}
	g.Version, g.ShortNames, g.Subresources = "v2", []string{"gd"}, []string{"status"}
	if k, err = objects.Replace(g); err != nil || k.Version != "v2" || !k.HasSubresource("status") {
		t.Fatalf("second Replace: %v %v", k, err)
	}
	if _, err := objects.KindForResource("gdg"); err == nil {
		t.Error("the replaced kind's short name still resolves")
	}
	u := &corev1.Unstructured{ApiVersion: "replace.test.io/v1", Kind: "Gadget"}
	if got, err := objects.KindOf(u); err != nil || got.Version != "v2" {
		t.Fatalf("KindOf after replace: %v %v", got, err)
	}
	if !objects.Unregister("replace.test.io", "Gadget") {
		t.Fatal("Unregister found nothing")
	}
	if _, err := objects.KindOf(u); !errors.Is(err, objects.ErrUnknownKind) {
		t.Errorf("KindOf after Unregister: %v", err)
	}
	if _, err := objects.KindForResource("gadgets.replace.test.io"); err == nil {
		t.Error("the resource still resolves after Unregister")
	}
	if objects.Unregister("apps", "Deployment") {
		t.Error("Unregister removed a built-in kind")
	}
	if _, err := objects.Replace(objects.GenericKind{Group: "apps", Version: "v1", Kind: "Deployment", Resource: "deployments",
		Prefix: objects.CustomResourcePrefix("apps", "deployments")}); !errors.Is(err, objects.ErrInvalid) {
		t.Errorf("Replace of a built-in kind: %v", err)
	}
	// A prefix that overlaps another kind's is refused, and nothing changes.
	if _, err := objects.Replace(objects.GenericKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "Thing", Resource: "customresourcedefinitions",
		Prefix: objects.CustomResourcePrefix("apiextensions.k8s.io", "customresourcedefinitions")}); !errors.Is(err, objects.ErrInvalid) {
		t.Errorf("Replace over the CRD prefix: %v", err)
	}
}
