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
	"k8s.io/utils/ptr"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/services/objects"
)

// TestPodStatusWrite: PUT and PATCH pods/status write a pod's status as
// kube-apiserver's pod status strategy does. An UpdateStatus without a
// resourceVersion sets phase Failed (kube's DaemonSet e2e "should retry
// creating failed daemon pods") and leaves the spec alone whatever the
// request's; a merge patch sets an annotation and a condition (sig-node's
// "should patch a pod status"); podflow's node-report sequence annotation
// and the qosClass cannot be changed; a user with `update pods` but not
// `update pods/status` is forbidden.
func TestPodStatusWrite(t *testing.T) {
	t.Parallel()
	s, cfg, cs := startExecSystem(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := objects.Mutate(ctx, s.store, "default", "web", func(p *corev1.Pod) error {
		p.Metadata.Annotations = map[string]string{podrules.AnnotationStatusSeq: "7"}
		p.Status.QosClass = "BestEffort"
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	pod, err := cs.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.ResourceVersion = ""
	pod.Status.Phase = k8scorev1.PodFailed
	pod.Spec.Containers[0].Image = "evil" // not through the status subresource
	pod.Annotations = map[string]string{podrules.AnnotationStatusSeq: "999"}
	out, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("UpdateStatus: %v", err)
	}
	if out.Status.Phase != k8scorev1.PodFailed || out.Spec.Containers[0].Image != "busybox" || out.Status.QOSClass != "BestEffort" {
		t.Errorf("answer: phase %q image %q qos %q", out.Status.Phase, out.Spec.Containers[0].Image, out.Status.QOSClass)
	}
	stored, err := objects.Get[*corev1.Pod](ctx, s.store, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if stored.GetStatus().GetPhase() != "Failed" || stored.GetSpec().GetContainers()[0].GetImage() != "busybox" ||
		stored.GetMetadata().GetAnnotations()[podrules.AnnotationStatusSeq] != "7" {
		t.Errorf("stored: phase %q image %q annotations %v", stored.GetStatus().GetPhase(), stored.GetSpec().GetContainers()[0].GetImage(),
			stored.GetMetadata().GetAnnotations())
	}

	patch := `{"metadata":{"annotations":{"patchedstatus":"true"}},"status":{"conditions":[{"type":"PodReady","status":"True"}]}}`
	out, err = cs.CoreV1().Pods("default").Patch(ctx, "web", types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatalf("patch status: %v", err)
	}
	if out.Annotations["patchedstatus"] != "true" || len(out.Status.Conditions) != 1 || out.Status.Conditions[0].Type != "PodReady" {
		t.Errorf("patched: annotations %v conditions %v", out.Annotations, out.Status.Conditions)
	}

	out.Status.QOSClass = k8scorev1.PodQOSGuaranteed
	_, err = cs.CoreV1().Pods("default").UpdateStatus(ctx, out, metav1.UpdateOptions{})
	const qosMsg = `Pod "web" is invalid: status.qosClass: Invalid value: "Guaranteed": field is immutable`
	if !apierrors.IsInvalid(err) || err.Error() != qosMsg {
		t.Errorf("qosClass changed: %v\nwant %s", err, qosMsg)
	}

	// alice may update pods, not pods/status.
	_, acs := aliceMay(t, ctx, s, cfg, "pod-writer", "get", "update", "patch")
	pod, err = acs.CoreV1().Pods("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = k8scorev1.PodSucceeded
	if _, err := acs.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("alice's UpdateStatus: %v, want Forbidden", err)
	}
}

// TestPodStatusSubresource: pods/status takes updates and patches as
// kube-apiserver's pod StatusREST does (the conformance tests "Pods should
// patch a pod status" and "should run through the lifecycle of Pods and
// PodStatus"): the status and labels and annotations change, the spec
// does not.
func TestPodStatusSubresource(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	cs := s.adminClientset(t)
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
	t.Parallel()
	s := startSystem(t, options{})
	cs := s.adminClientset(t)
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
