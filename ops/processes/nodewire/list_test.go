package nodewire_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/podflow/podflow/ops/processes/nodewire"
	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/objects/objectstest"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestListPodsByNode: ListPodsByNode hands each node exactly its pods,
// and ListNodePods the same, each as the store holds it (its
// resourceVersion the store's) but for its status, of which only the
// phase, conditions and startTime are kept, and its spec's scheduling
// fields; a node without pods gets none.
func TestListPodsByNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := objects.FromKV(objectstest.New())
	s := nodewire.NewStore(st)
	start := timestamppb.New(time.Unix(1700000000, 5))
	stored := map[string][]*corev1.Pod{}
	for i, node := range []string{"node-a", "node-b", "node-a", ""} {
		p := &corev1.Pod{
			Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "p" + string(rune('0'+i)), Uid: "uid-" + string(rune('0'+i)),
				Labels: map[string]string{"app": "x"}},
			Spec: &corev1.PodSpec{NodeName: node, Containers: []*corev1.Container{{Name: "app", Image: "nginx"}},
				Tolerations:       []*corev1.Toleration{{Key: "k", Operator: "Exists"}},
				Affinity:          &corev1.Affinity{},
				Hostname:          "h",
				PriorityClassName: "high"},
			Status: &corev1.PodStatus{Phase: "Running", StartTime: start, HostIp: "10.0.0.1", PodIp: "10.1.0.1",
				PodIps: []*corev1.PodIP{{Ip: "10.1.0.1"}}, QosClass: "BestEffort", Reason: "r", Message: "m",
				Conditions: []*corev1.PodCondition{{Type: "Ready", Status: "True", LastTransitionTime: start},
					{Type: "PodScheduled", Status: "True"}},
				ContainerStatuses: []*corev1.ContainerStatus{{Name: "app", Ready: true, Image: "nginx", ImageId: "sha",
					State: &corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: start}}}}},
		}
		rev, err := st.Create(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		objects.SetRevision(p, rev)
		stored[node] = append(stored[node], p)
	}
	// What a listed pod holds: all but the status parts no agent reads.
	want := func(node string) []*corev1.Pod {
		var out []*corev1.Pod
		for _, p := range stored[node] {
			p = proto.CloneOf(p)
			p.Status = &corev1.PodStatus{Phase: p.Status.Phase, Conditions: p.Status.Conditions, StartTime: p.Status.StartTime}
			p.Spec.Tolerations, p.Spec.Affinity = nil, nil
			out = append(out, p)
		}
		return out
	}
	equal := func(got, want []*corev1.Pod) bool {
		return slices.EqualFunc(got, want, func(x, y *corev1.Pod) bool { return proto.Equal(x, y) })
	}
	podsOf, err := s.ListPodsByNode(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"node-a", "node-b", "", "node-c"} {
		got, err := podsOf(node)
		if err != nil {
			t.Fatal(err)
		}
		if !equal(got, want(node)) {
			t.Errorf("ListPodsByNode's pods of %q = %v, want %v", node, got, want(node))
		}
		listed, err := s.ListNodePods(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		if !equal(listed, want(node)) {
			t.Errorf("ListNodePods(%q) = %v, want %v", node, listed, want(node))
		}
	}
}

// TestListNodes: ListNodes lists every node with its name,
// resourceVersion and status as stored, and nothing else.
func TestListNodes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := objects.FromKV(objectstest.New())
	s := nodewire.NewStore(st)
	var want []*corev1.Node
	for _, name := range []string{"node-a", "node-b"} {
		n := &corev1.Node{
			Metadata: &corev1.ObjectMeta{Name: name, Uid: "uid-" + name, Labels: map[string]string{"kubernetes.io/hostname": name}},
			Spec:     &corev1.NodeSpec{PodCidr: "10.244.1.0/24", Taints: []*corev1.Taint{{Key: "k", Effect: "NoSchedule"}}},
			Status: &corev1.NodeStatus{Capacity: map[string]string{"cpu": "8", "example.com/gpu": "2"}, Allocatable: map[string]string{"cpu": "8"},
				Conditions: []*corev1.NodeCondition{{Type: "Ready", Status: "True", Reason: "KubeletReady"}},
				Addresses:  []*corev1.NodeAddress{{Type: "InternalIP", Address: "172.16.0.1"}}},
		}
		rev, err := st.Create(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, &corev1.Node{Metadata: &corev1.ObjectMeta{Name: name, ResourceVersion: fmt.Sprint(rev)}, Status: n.Status})
	}
	got, err := s.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(got, want, func(x, y *corev1.Node) bool { return proto.Equal(x, y) }) {
		t.Errorf("ListNodes = %v, want %v", got, want)
	}
}
