package apiserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

// TestPodStatusSubresource: pods/status takes updates and patches as
// kube-apiserver's pod StatusREST does (the conformance tests "Pods should
// patch a pod status" and "should run through the lifecycle of Pods and
// PodStatus"): the status and labels and annotations change, the spec
// does not.
func TestPodStatusSubresource(t *testing.T) {
	s := startSystem(t, options{})
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: s.url, BearerToken: adminToken, TLSClientConfig: rest.TLSClientConfig{CAData: s.ca.CertPEM}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods := cs.CoreV1().Pods("default")
	pod := &k8scorev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "st"},
		Spec:       k8scorev1.PodSpec{Containers: []k8scorev1.Container{{Name: "c", Image: "nginx"}}},
	}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	patched, err := pods.Patch(ctx, "st", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"patchedstatus":"true"}},"status":{"message":"Patched by e2e test","reason":"E2E"},"spec":{"activeDeadlineSeconds":5}}`),
		metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatalf("patch status: %v", err)
	}
	if patched.Status.Message != "Patched by e2e test" || patched.Status.Reason != "E2E" || patched.Annotations["patchedstatus"] != "true" {
		t.Errorf("patched: status %+v annotations %v", patched.Status, patched.Annotations)
	}
	if patched.Spec.ActiveDeadlineSeconds != nil {
		t.Errorf("a status patch changed the spec: activeDeadlineSeconds %d", *patched.Spec.ActiveDeadlineSeconds)
	}
	got, err := pods.Get(ctx, "st", metav1.GetOptions{})
	if err != nil || got.Status.Reason != "E2E" || got.Spec.ActiveDeadlineSeconds != nil {
		t.Fatalf("stored: %+v %v", got, err)
	}

	got.Status.Conditions = append(got.Status.Conditions, k8scorev1.PodCondition{Type: "StatusUpdated", Status: k8scorev1.ConditionTrue})
	got.Spec.Containers[0].Image = "busybox"
	updated, err := pods.UpdateStatus(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update status: %v", err)
	}
	found := false
	for _, c := range updated.Status.Conditions {
		found = found || (c.Type == "StatusUpdated" && c.Status == k8scorev1.ConditionTrue)
	}
	if !found || updated.Spec.Containers[0].Image != "nginx" || updated.Generation != 1 {
		t.Errorf("updated: conditions %v image %q generation %d", updated.Status.Conditions, updated.Spec.Containers[0].Image, updated.Generation)
	}
	// An update from a stale read is a conflict.
	if _, err := pods.UpdateStatus(ctx, got, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("stale status update: %v, want Conflict", err)
	}
	if _, err := pods.Patch(ctx, "none", types.MergePatchType, []byte(`{"status":{"reason":"E2E"}}`), metav1.PatchOptions{}, "status"); !apierrors.IsNotFound(err) {
		t.Errorf("status patch of no pod: %v, want NotFound", err)
	}
}

// TestPodActiveDeadlineUpdate: an update may set activeDeadlineSeconds or
// lower it, never raise or remove it (kube's ValidatePodUpdate; the
// conformance test "Pods should allow activeDeadlineSeconds to be
// updated").
func TestPodActiveDeadlineUpdate(t *testing.T) {
	s := startSystem(t, options{})
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: s.url, BearerToken: adminToken, TLSClientConfig: rest.TLSClientConfig{CAData: s.ca.CertPEM}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods := cs.CoreV1().Pods("default")
	pod := &k8scorev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "dl"},
		Spec:       k8scorev1.PodSpec{Containers: []k8scorev1.Container{{Name: "c", Image: "nginx"}}},
	}
	if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	set := func(v *int64) (*k8scorev1.Pod, error) {
		p, err := pods.Get(ctx, "dl", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Spec.ActiveDeadlineSeconds = v
		return pods.Update(ctx, p, metav1.UpdateOptions{})
	}
	for _, step := range []struct {
		value      *int64
		err        string // "" = accepted
		generation int64  // after an accepted step: each spec change bumps it
	}{
		{ptr.To[int64](30), "", 2},
		{ptr.To[int64](5), "", 3},
		{ptr.To[int64](5), "", 3},
		{ptr.To[int64](10), "spec.activeDeadlineSeconds: Invalid value: 10: must be less than or equal to previous value", 0},
		{ptr.To[int64](-1), "spec.activeDeadlineSeconds: Invalid value: -1: must be between 0 and 2147483647, inclusive", 0},
		{nil, "spec.activeDeadlineSeconds: Invalid value: null: must not update from a positive integer to nil value", 0},
	} {
		p, err := set(step.value)
		switch {
		case step.err == "" && err != nil:
			t.Errorf("set %v: %v", step.value, err)
		case step.err == "" && (*p.Spec.ActiveDeadlineSeconds != *step.value || p.Generation != step.generation):
			t.Errorf("set %d: stored %v, generation %d (want %d)", *step.value, p.Spec.ActiveDeadlineSeconds, p.Generation, step.generation)
		case step.err != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), step.err)):
			t.Errorf("set %v: %v, want Invalid %q", step.value, err, step.err)
		}
	}
	// Another spec field is still refused, naming what may change.
	p, err := pods.Get(ctx, "dl", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Spec.RestartPolicy = k8scorev1.RestartPolicyNever
	if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "`spec.activeDeadlineSeconds`") {
		t.Errorf("restartPolicy update: %v, want Invalid naming the updatable fields", err)
	}
}
