package scheduler_test

import (
	"errors"
	"fmt"

	"github.com/podflow/podflow/services/stages/scheduler/cache"
	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/stages/scheduler"
)

func exampleNode(name, cpu string, taints ...*corev1.Taint) *corev1.Node {
	return &corev1.Node{
		Metadata: &corev1.ObjectMeta{Name: name},
		Spec:     &corev1.NodeSpec{Taints: taints},
		Status: &corev1.NodeStatus{
			Allocatable: map[string]string{"cpu": cpu, "memory": "8Gi", "pods": "110"},
			Conditions:  []*corev1.NodeCondition{{Type: "Ready", Status: "True"}},
		},
	}
}

func examplePod(name, cpu string) *corev1.Pod {
	return &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Namespace: "default", Name: name, Uid: name},
		Spec: &corev1.PodSpec{Containers: []*corev1.Container{{
			Name: "app", Image: "nginx",
			Resources: &corev1.ResourceRequirements{Requests: map[string]string{"cpu": cpu, "memory": "128Mi"}},
		}}},
	}
}

func Example() {
	cache := cache.NewCache()
	gpu := &corev1.Taint{Key: "dedicated", Value: "gpu", Effect: "NoSchedule"}
	for _, n := range []*corev1.Node{exampleNode("a", "2"), exampleNode("b", "1"), exampleNode("gpu", "8", gpu)} {
		if err := cache.AddNode(n); err != nil {
			panic(err)
		}
	}
	sched, err := scheduler.New(scheduler.DefaultConfig())
	if err != nil {
		panic(err)
	}
	snap := framework.NewSnapshot()
	for _, pod := range []*corev1.Pod{examplePod("web-1", "1500m"), examplePod("web-2", "1500m")} {
		cache.UpdateSnapshot(snap)
		res, err := sched.Schedule(pod, snap)
		if errors.Is(err, framework.ErrUnschedulable) {
			fmt.Printf("%s: %v\n", pod.Metadata.Name, err)
			continue
		}
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s -> %s\n", pod.Metadata.Name, res.Node)
		if err := cache.AssumePod(pod, res.Node); err != nil {
			panic(err)
		}
	}
	// Output:
	// web-1 -> a
	// web-2: 0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 2 Insufficient cpu. preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, 2 No preemption victims found for incoming pod..
}
