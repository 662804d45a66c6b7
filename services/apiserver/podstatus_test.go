package apiserver_test

import (
	"context"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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
