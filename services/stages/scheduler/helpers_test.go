package scheduler

import (
	"fmt"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
)

// Builders for test objects.

type nodeOpt func(*corev1.Node)

func mkNode(name, cpu, mem string, opts ...nodeOpt) *corev1.Node {
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

func maxPods(v string) nodeOpt { return func(n *corev1.Node) { n.Status.Allocatable["pods"] = v } }

func labels(kv ...string) nodeOpt {
	return func(n *corev1.Node) {
		for i := 0; i < len(kv); i += 2 {
			n.Metadata.Labels[kv[i]] = kv[i+1]
		}
	}
}

func taints(ts ...*corev1.Taint) nodeOpt {
	return func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, ts...) }
}

func tnt(key, value, effect string) *corev1.Taint {
	return &corev1.Taint{Key: key, Value: value, Effect: effect}
}

func ready(status string) nodeOpt {
	return func(n *corev1.Node) { n.Status.Conditions = []*corev1.NodeCondition{{Type: "Ready", Status: status}} }
}

func cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }

func images(size int64, names ...string) nodeOpt {
	return func(n *corev1.Node) {
		n.Status.Images = append(n.Status.Images, &corev1.ContainerImage{Names: names, SizeBytes: size})
	}
}

type podOpt func(*corev1.Pod)

// mkPod returns a pod with one container requesting cpu and memory (an
// empty string requests nothing).
func mkPod(name, cpu, mem string, opts ...podOpt) *corev1.Pod {
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

func onNode(node string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = node } }

func hostPort(port int32, proto, ip string) podOpt {
	return func(p *corev1.Pod) {
		c := p.Spec.Containers[0]
		c.Ports = append(c.Ports, &corev1.ContainerPort{HostPort: port, ContainerPort: port, Protocol: proto, HostIp: ip})
	}
}

func tolerate(key, op, value, effect string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, &corev1.Toleration{Key: key, Operator: op, Value: value, Effect: effect})
	}
}

func nodeSelector(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			p.Spec.NodeSelector[kv[i]] = kv[i+1]
		}
	}
}

func expr(key, op string, values ...string) *corev1.NodeSelectorRequirement {
	return &corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func term(exprs ...*corev1.NodeSelectorRequirement) *corev1.NodeSelectorTerm {
	return &corev1.NodeSelectorTerm{MatchExpressions: exprs}
}

func affinity(p *corev1.Pod) *corev1.NodeAffinity {
	if p.Spec.Affinity == nil {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{}}
	}
	return p.Spec.Affinity.NodeAffinity
}

func required(terms ...*corev1.NodeSelectorTerm) podOpt {
	return func(p *corev1.Pod) {
		affinity(p).RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: terms}
	}
}

func preferred(weight int32, t *corev1.NodeSelectorTerm) podOpt {
	return func(p *corev1.Pod) {
		na := affinity(p)
		na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution,
			&corev1.PreferredSchedulingTerm{Weight: weight, Preference: t})
	}
}

func image(img string) podOpt { return func(p *corev1.Pod) { p.Spec.Containers[0].Image = img } }

// cacheWith returns a cache holding the nodes and bound pods.
func cacheWith(t testing.TB, nodes []*corev1.Node, pods ...*corev1.Pod) *Cache {
	t.Helper()
	c := NewCache()
	for _, n := range nodes {
		if err := c.AddNode(n); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pods {
		if err := c.AddPod(p); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// infoOf returns the NodeInfo of node with the bound pods.
func infoOf(t testing.TB, node *corev1.Node, pods ...*corev1.Pod) *NodeInfo {
	t.Helper()
	n, ok := cacheWith(t, []*corev1.Node{node}, pods...).NodeInfo(node.Metadata.Name)
	if !ok {
		t.Fatalf("node %q not in cache", node.Metadata.Name)
	}
	return n
}

func newTestScheduler(t testing.TB, mutate ...func(*Config)) *Scheduler {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Seed = 1
	for _, m := range mutate {
		m(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func nodeNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	return out
}
