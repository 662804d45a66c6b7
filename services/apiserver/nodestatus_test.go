package apiserver_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestNodeStatusExtendedResource: nodes/status as the scheduler's e2e
// tests use it (e2enode.AddExtendedResource): a pod asking for
// example.com/fakecpu is unschedulable until a client-go strategic merge
// patch of the node's status advertises it; then the scheduler binds the
// pod to the node. The patch cannot change the spec; a quantity kube's
// ValidateNodeUpdate refuses is 422; UpdateStatus removes the resource
// again; nodes/status needs its own permission (patch on nodes is not
// enough).
func TestNodeStatusExtendedResource(t *testing.T) {
	s := startSystem(t, options{scheduler: true})
	cs := s.adminClientset(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const fakecpu = k8scorev1.ResourceName("example.com/fakecpu")

	node := &k8scorev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"kubernetes.io/hostname": "n1"}},
		Status: k8scorev1.NodeStatus{
			Capacity: k8scorev1.ResourceList{k8scorev1.ResourceCPU: resource.MustParse("4"),
				k8scorev1.ResourceMemory: resource.MustParse("8Gi"), k8scorev1.ResourcePods: resource.MustParse("110")},
			Allocatable: k8scorev1.ResourceList{k8scorev1.ResourceCPU: resource.MustParse("4"),
				k8scorev1.ResourceMemory: resource.MustParse("8Gi"), k8scorev1.ResourcePods: resource.MustParse("110")},
			Conditions: []k8scorev1.NodeCondition{{Type: k8scorev1.NodeReady, Status: k8scorev1.ConditionTrue,
				Reason: "KubeletReady", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
		},
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := k8scorev1.ResourceList{fakecpu: resource.MustParse("500")}
	pod := &k8scorev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "wants-fakecpu"},
		Spec: k8scorev1.PodSpec{Containers: []k8scorev1.Container{{Name: "c", Image: "busybox",
			Resources: k8scorev1.ResourceRequirements{Requests: want, Limits: want}}}},
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The scheduler tried and found no node with the resource.
	waitPod(ctx, t, cs, "unschedulable", func(p *k8scorev1.Pod) bool {
		for _, c := range p.Status.Conditions {
			if c.Type == k8scorev1.PodScheduled && c.Status == k8scorev1.ConditionFalse && c.Reason == "Unschedulable" {
				return true
			}
		}
		return false
	})

	// e2enode.AddExtendedResource's patch, with a spec change the status
	// subresource must ignore.
	patch, _ := json.Marshal(map[string]any{
		"spec":   map[string]any{"unschedulable": true},
		"status": map[string]any{"capacity": k8scorev1.ResourceList{fakecpu: resource.MustParse("1000")}, "allocatable": k8scorev1.ResourceList{fakecpu: resource.MustParse("1000")}},
	})
	got, err := cs.CoreV1().Nodes().Patch(ctx, "n1", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	if q := got.Status.Allocatable[fakecpu]; q.String() != "1k" || got.Spec.Unschedulable {
		t.Fatalf("patched status: allocatable %v, unschedulable %v", got.Status.Allocatable, got.Spec.Unschedulable)
	}
	if q := got.Status.Allocatable[k8scorev1.ResourceCPU]; q.String() != "4" {
		t.Errorf("the patch lost cpu: %v", got.Status.Allocatable)
	}
	// The scheduler sees the new allocatable and binds the waiting pod.
	waitPod(ctx, t, cs, "bound to n1", func(p *k8scorev1.Pod) bool { return p.Spec.NodeName == "n1" })

	// A quantity kube's ValidateNodeUpdate refuses.
	bad := []byte(`{"status":{"capacity":{"example.com/fakecpu":"500m"}}}`)
	_, err = cs.CoreV1().Nodes().Patch(ctx, "n1", types.StrategicMergePatchType, bad, metav1.PatchOptions{}, "status")
	if err == nil || !strings.Contains(err.Error(), `Node "n1" is invalid: status.capacity.example.com/fakecpu: Invalid value: "500m": must be an integer`) {
		t.Errorf("a fractional extended resource: %v", err)
	}

	// The pod overhead e2e test's UpdateStatus: resourceVersion "0" is
	// none, so a write since the read is no conflict.
	stale, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Patch(ctx, "n1", types.StrategicMergePatchType, []byte(`{"metadata":{"labels":{"moved":"on"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	stale.ResourceVersion = "0"
	stale.Status.Capacity["example.com/beardsecond"] = resource.MustParse("1000")
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, stale, metav1.UpdateOptions{}); err != nil {
		t.Errorf("UpdateStatus with resourceVersion 0: %v", err)
	}

	// e2enode.RemoveExtendedResource: Get, delete, UpdateStatus.
	n, err := cs.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(n.Status.Capacity, fakecpu)
	delete(n.Status.Allocatable, fakecpu)
	n.Spec.Unschedulable = true
	if n, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.Status.Capacity[fakecpu]; ok || n.Spec.Unschedulable {
		t.Errorf("after UpdateStatus: capacity %v, unschedulable %v", n.Status.Capacity, n.Spec.Unschedulable)
	}

	// Alice may patch nodes, not nodes/status.
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "node-patcher"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch", "update"}}}},
		metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "node-patcher"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "node-patcher"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "alice"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	alice, err := kubernetes.NewForConfig(&rest.Config{Host: s.url, BearerToken: aliceToken, TLSClientConfig: rest.TLSClientConfig{CAData: s.ca.CertPEM}})
	if err != nil {
		t.Fatal(err)
	}
	label := []byte(`{"metadata":{"labels":{"patched":"by-alice"}}}`)
	if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := alice.CoreV1().Nodes().Patch(ctx, "n1", types.StrategicMergePatchType, label, metav1.PatchOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("alice never got to patch nodes: %v", err)
	}
	_, err = alice.CoreV1().Nodes().Patch(ctx, "n1", types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err == nil || !strings.Contains(err.Error(), `cannot patch resource "nodes/status"`) {
		t.Errorf("alice patched nodes/status: %v", err)
	}
}

func waitPod(ctx context.Context, t *testing.T, cs *kubernetes.Clientset, what string, ok func(*k8scorev1.Pod) bool) {
	t.Helper()
	var last *k8scorev1.Pod
	if err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "wants-fakecpu", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = p
		return ok(p), nil
	}); err != nil {
		t.Fatalf("pod never %s: %+v", what, last)
	}
}

// TestNodeUpdateKeepsStatus: a PUT on nodes changes the spec and metadata
// and keeps the stored status, as kube's nodeStrategy.PrepareForUpdate;
// only nodes/status changes it.
func TestNodeUpdateKeepsStatus(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	cs := s.adminClientset(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	four := k8scorev1.ResourceList{k8scorev1.ResourceCPU: resource.MustParse("4")}
	node := &k8scorev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "keep"},
		Status: k8scorev1.NodeStatus{Capacity: four, Allocatable: four}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, "keep", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels = map[string]string{"updated": "yes"}
	n.Spec.Unschedulable = true
	n.Status.Capacity = k8scorev1.ResourceList{k8scorev1.ResourceCPU: resource.MustParse("64")}
	n.Status.Allocatable = n.Status.Capacity
	n.Status.Conditions = []k8scorev1.NodeCondition{{Type: k8scorev1.NodeReady, Status: k8scorev1.ConditionTrue}}
	got, err := cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels["updated"] != "yes" || !got.Spec.Unschedulable {
		t.Errorf("the update lost its spec or labels: %v %+v", got.Labels, got.Spec)
	}
	for _, n := range []*k8scorev1.Node{got, mustGetNode(ctx, t, cs, "keep")} {
		if q := n.Status.Capacity[k8scorev1.ResourceCPU]; q.String() != "4" || len(n.Status.Conditions) != 0 {
			t.Errorf("a PUT on nodes changed the status: capacity %v, conditions %v", n.Status.Capacity, n.Status.Conditions)
		}
	}
	// nodes/status does change it.
	n = mustGetNode(ctx, t, cs, "keep")
	n.Status.Capacity = k8scorev1.ResourceList{k8scorev1.ResourceCPU: resource.MustParse("64")}
	if got, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if q := got.Status.Capacity[k8scorev1.ResourceCPU]; q.String() != "64" {
		t.Errorf("UpdateStatus: capacity %v", got.Status.Capacity)
	}
}

func mustGetNode(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) *k8scorev1.Node {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
