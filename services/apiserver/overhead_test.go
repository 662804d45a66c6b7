package apiserver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// TestRuntimeClassOverheadUnschedulable: a RuntimeClass's overhead, copied
// into the pod by admission, counts with the pod's requests in the
// scheduler: on a 1-cpu node, a pod asking 500m of a class with a 600m
// overhead is Unschedulable (Insufficient cpu); the same pod without the
// class is bound.
func TestRuntimeClassOverheadUnschedulable(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{scheduler: true})
	cs := s.adminClientset(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	list := k8scorev1.ResourceList{k8scorev1.ResourceCPU: resource.MustParse("1"),
		k8scorev1.ResourceMemory: resource.MustParse("8Gi"), k8scorev1.ResourcePods: resource.MustParse("110")}
	node := &k8scorev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "small", Labels: map[string]string{"kubernetes.io/hostname": "small"}},
		Status: k8scorev1.NodeStatus{Capacity: list, Allocatable: list,
			Conditions: []k8scorev1.NodeCondition{{Type: k8scorev1.NodeReady, Status: k8scorev1.ConditionTrue,
				Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}},
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "kata"}, Handler: "kata",
		Overhead: &nodev1.Overhead{PodFixed: k8scorev1.ResourceList{k8scorev1.ResourceCPU: resource.MustParse("600m")}}}
	if _, err := cs.NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	half := k8scorev1.ResourceList{k8scorev1.ResourceCPU: resource.MustParse("500m")}
	pod := func(name, class string) *k8scorev1.Pod {
		p := &k8scorev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: k8scorev1.PodSpec{Containers: []k8scorev1.Container{{Name: "c", Image: "busybox",
				Resources: k8scorev1.ResourceRequirements{Requests: half}}}}}
		if class != "" {
			p.Spec.RuntimeClassName = &class
		}
		return p
	}
	created, err := cs.CoreV1().Pods("default").Create(ctx, pod("with-overhead", "kata"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if q := created.Spec.Overhead[k8scorev1.ResourceCPU]; q.String() != "600m" {
		t.Fatalf("admission set overhead %v, want cpu 600m", created.Spec.Overhead)
	}
	waitForPod(ctx, t, cs, "with-overhead", "Unschedulable, Insufficient cpu", func(p *k8scorev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == k8scorev1.PodScheduled && c.Status == k8scorev1.ConditionFalse && c.Reason == "Unschedulable" &&
				strings.Contains(c.Message, "Insufficient cpu") {
				return true
			}
		}
		return false
	})
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod("without", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForPod(ctx, t, cs, "without", "bound to small", func(p *k8scorev1.Pod) bool { return p.Spec.NodeName == "small" })
	p, err := cs.CoreV1().Pods("default").Get(ctx, "with-overhead", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" {
		t.Errorf("the pod with overhead was bound to %s", p.Spec.NodeName)
	}
}

func waitForPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, name, what string, ok func(*k8scorev1.Pod) bool) {
	t.Helper()
	var last *k8scorev1.Pod
	if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return ok(p), nil
	}); err != nil {
		t.Fatalf("pod %s never %s: %+v", name, what, last)
	}
}
