package statefulset

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	apps "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubehistory "k8s.io/kubernetes/pkg/controller/history"

	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/registry"
)

// kubePatch is kube's getPatch (stateful_set_utils.go): the set's
// template as a strategic merge patch, the data of its revisions.
func kubePatch(t *testing.T, set *apps.StatefulSet) []byte {
	t.Helper()
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	spec := raw["spec"].(map[string]any)
	tmpl := spec["template"].(map[string]any)
	tmpl["$patch"] = "replace"
	out, err := json.Marshal(map[string]any{"spec": map[string]any{"template": tmpl}})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRevisionDataRoundTrips: a ControllerRevision stored through the
// registry and decoded again has the very bytes kube's code made, so
// kube's EqualRevision (bytes.Equal of the data) finds it and no
// duplicate revision is made on the next sync.
func TestRevisionDataRoundTrips(t *testing.T) {
	grace := int64(30)
	set := &apps.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "u1"},
		Spec: apps.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"z": "1", "a": "2"}},
				Spec: v1.PodSpec{TerminationGracePeriodSeconds: &grace, Containers: []v1.Container{{Name: "app", Image: "busybox",
					Command: []string{"sleep", "3600"}, Env: []v1.EnvVar{{Name: "B", Value: "1e6"}, {Name: "A", Value: "x"}}}}},
			},
		},
	}
	data := kubePatch(t, set)
	cr, err := kubehistory.NewControllerRevision(set, controllerKind, set.Spec.Template.Labels, runtime.RawExtension{Raw: data}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	cr.Name = kubehistory.ControllerRevisionName(set.Name, kubehistory.HashControllerRevision(cr, nil))
	cr.Namespace = set.Namespace
	cr.TypeMeta = revisionTM
	u, err := toStored(cr)
	if err != nil {
		t.Fatal(err)
	}
	if _, st := registry.Default().PrepareCreate(context.Background(), pipeline.ControllerUser(pipeline.StatefulSet), "", u); st != nil {
		t.Fatal(st)
	}
	u.Metadata.ResourceVersion = "7"
	out := &apps.ControllerRevision{}
	if err := fromStored(u, out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Data.Raw, data) {
		t.Errorf("data after the store\n got %s\nwant %s", out.Data.Raw, data)
	}
	if out.ResourceVersion != "7" || out.Revision != 1 || metav1.GetControllerOf(out).UID != "u1" {
		t.Errorf("revision %+v", out.ObjectMeta)
	}
}

func TestCanonicalJSON(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"b": 1, "a": {"d": [1, 2.50, 1e6], "c": "x"}}`, `{"a":{"c":"x","d":[1,2.50,1e6]},"b":1}`},
		{`{"a":1}`, `{"a":1}`},
		{`not json`, `not json`},
		{``, ``},
	} {
		if got := string(canonicalJSON([]byte(tc.in))); got != tc.want {
			t.Errorf("canonicalJSON(%s) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

func TestIsMemberOf(t *testing.T) {
	set := &apps.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "web"}}
	for name, want := range map[string]bool{"web-0": true, "web-12": true, "web": false, "web-a": false, "web-web-0": false, "webx-0": false, "db-0": false} {
		if got := isMemberOf(set, name); got != want {
			t.Errorf("isMemberOf(web, %q) = %v, want %v", name, got, want)
		}
	}
}

// TestNoClaims: the controller makes no PersistentVolumeClaims: creating
// or updating one is 403 Forbidden saying why, and none is found.
func TestNoClaims(t *testing.T) {
	m := podManager{}
	claim := &v1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data-web-0"}}
	for _, err := range []error{m.CreateClaim(claim, nil), m.UpdateClaim(claim, nil)} {
		if !apierrors.IsForbidden(err) || !bytes.Contains([]byte(err.Error()), []byte("podflow has no storage provisioner")) {
			t.Errorf("got %v", err)
		}
	}
	if _, err := m.GetClaim("default", "data-web-0"); !apierrors.IsNotFound(err) {
		t.Errorf("GetClaim: %v", err)
	}
}
