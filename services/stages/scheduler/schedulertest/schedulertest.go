// Package schedulertest builds the nodes and pods the scheduler's tests
// schedule: a Ready node with allocatable cpu, memory, 110 pods and
// ephemeral storage; a pod with one container requesting cpu and memory;
// and options for Labels, Taints, tolerations, node affinity, host ports
// and Images. It imports nothing of the scheduler, so that the tests of
// every part of it (framework, cache, plugins, the stage) can use it.
package schedulertest

import (
	"fmt"

	"github.com/podflow/podflow/proto/corev1"
)

// Node returns a Ready node with allocatable cpu, mem, 110 pods and
// 100Gi of ephemeral storage.
// NodeOpt changes a node Node builds.
type NodeOpt func(*corev1.Node)

func Node(name, cpu, mem string, opts ...NodeOpt) *corev1.Node {
	n := &corev1.Node{
		Metadata: &corev1.ObjectMeta{Name: name, Labels: map[string]string{}},
		Spec:     &corev1.NodeSpec{},
		Status: &corev1.NodeStatus{
			Allocatable: map[string]string{"cpu": cpu, "memory": mem, "pods": "110", "ephemeral-storage": "100Gi"},
			Conditions:  []*corev1.NodeCondition{{Type: "Ready", Status: "True"}},
		},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

// MaxPods sets the node's allocatable pod count.
func MaxPods(v string) NodeOpt { return func(n *corev1.Node) { n.Status.Allocatable["pods"] = v } }

// Labels adds the labels k1, v1, k2, v2, ... to the node.
func Labels(kv ...string) NodeOpt {
	return func(n *corev1.Node) {
		for i := 0; i < len(kv); i += 2 {
			n.Metadata.Labels[kv[i]] = kv[i+1]
		}
	}
}

// Taints adds taints to the node.
func Taints(ts ...*corev1.Taint) NodeOpt {
	return func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, ts...) }
}

// Taint is a node taint.
func Taint(key, value, effect string) *corev1.Taint {
	return &corev1.Taint{Key: key, Value: value, Effect: effect}
}

// Ready sets the node's Ready condition to status.
func Ready(status string) NodeOpt {
	return func(n *corev1.Node) { n.Status.Conditions = []*corev1.NodeCondition{{Type: "Ready", Status: status}} }
}

// Cordoned marks the node unschedulable.
func Cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }

// Images adds an image of size bytes, with names, to the node's status.
func Images(size int64, names ...string) NodeOpt {
	return func(n *corev1.Node) {
		n.Status.Images = append(n.Status.Images, &corev1.ContainerImage{Names: names, SizeBytes: size})
	}
}

// PodOpt changes a pod Pod builds.
type PodOpt func(*corev1.Pod)

// Pod returns a pod with one container requesting cpu and memory (an
// empty string requests nothing).
func Pod(name, cpu, mem string, opts ...PodOpt) *corev1.Pod {
	c := &corev1.Container{Name: "c", Image: "app", Resources: &corev1.ResourceRequirements{Requests: map[string]string{}}}
	if cpu != "" {
		c.Resources.Requests["cpu"] = cpu
	}
	if mem != "" {
		c.Resources.Requests["memory"] = mem
	}
	p := &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Name: name, Namespace: "default", Uid: "uid-" + name},
		Spec:     &corev1.PodSpec{Containers: []*corev1.Container{c}},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// OnNode binds the pod to node.
func OnNode(node string) PodOpt { return func(p *corev1.Pod) { p.Spec.NodeName = node } }

// HostPort makes the pod's container bind a host port.
func HostPort(port int32, proto, ip string) PodOpt {
	return func(p *corev1.Pod) {
		c := p.Spec.Containers[0]
		c.Ports = append(c.Ports, &corev1.ContainerPort{HostPort: port, ContainerPort: port, Protocol: proto, HostIp: ip})
	}
}

// Tolerate adds a toleration to the pod.
func Tolerate(key, op, value, effect string) PodOpt {
	return func(p *corev1.Pod) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, &corev1.Toleration{Key: key, Operator: op, Value: value, Effect: effect})
	}
}

// NodeSelector sets the pod's nodeSelector to k1=v1, k2=v2, ...
func NodeSelector(kv ...string) PodOpt {
	return func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			p.Spec.NodeSelector[kv[i]] = kv[i+1]
		}
	}
}

// Expr is a node selector requirement.
func Expr(key, op string, values ...string) *corev1.NodeSelectorRequirement {
	return &corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

// Term is a node selector term of exprs (ANDed).
func Term(exprs ...*corev1.NodeSelectorRequirement) *corev1.NodeSelectorTerm {
	return &corev1.NodeSelectorTerm{MatchExpressions: exprs}
}

func affinity(p *corev1.Pod) *corev1.NodeAffinity {
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}}
	}
	return p.Spec.Affinity.NodeAffinity
}

// Required sets the pod's required node affinity to terms (ORed).
func Required(terms ...*corev1.NodeSelectorTerm) PodOpt {
	return func(p *corev1.Pod) {
		affinity(p).RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: terms}
	}
}

// Preferred adds a preferred node affinity term of weight.
func Preferred(weight int32, t *corev1.NodeSelectorTerm) PodOpt {
	return func(p *corev1.Pod) {
		na := affinity(p)
		na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution,
			&corev1.PreferredSchedulingTerm{Weight: weight, Preference: t})
	}
}

// Image sets the image of the pod's container.
func Image(img string) PodOpt { return func(p *corev1.Pod) { p.Spec.Containers[0].Image = img } }

// NodeNames returns n node names prefix0000, prefix0001, ...
func NodeNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	return out
}
