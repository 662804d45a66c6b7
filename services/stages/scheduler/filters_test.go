package scheduler

import (
	"reflect"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
)

type filterCase struct {
	name string
	node *corev1.Node
	on   []*corev1.Pod // pods already on the node
	pod  *corev1.Pod
	want []string // nil: the node passes
}

func runFilterCases(t *testing.T, tests []filterCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Filter(tt.pod, infoOf(t, tt.node, tt.on...))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Filter = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFilterNodeUnschedulableAndReady(t *testing.T) {
	runFilterCases(t, []filterCase{
		{"schedulable ready node", mkNode("n", "1", "1Gi"), nil, mkPod("p", "", ""), nil},
		{"cordoned node", mkNode("n", "1", "1Gi", cordoned), nil, mkPod("p", "", ""),
			[]string{"node(s) were unschedulable"}},
		{"cordoned node, pod tolerates unschedulable", mkNode("n", "1", "1Gi", cordoned), nil,
			mkPod("p", "", "", tolerate("node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule")), nil},
		{"not ready", mkNode("n", "1", "1Gi", ready("False")), nil, mkPod("p", "", ""),
			[]string{"node(s) had untolerated taint {node.kubernetes.io/not-ready: }"}},
		{"no Ready condition", mkNode("n", "1", "1Gi", func(n *corev1.Node) { n.Status.Conditions = nil }), nil, mkPod("p", "", ""),
			[]string{"node(s) had untolerated taint {node.kubernetes.io/not-ready: }"}},
		{"ready unknown", mkNode("n", "1", "1Gi", ready("Unknown")), nil, mkPod("p", "", ""),
			[]string{"node(s) had untolerated taint {node.kubernetes.io/unreachable: }"}},
		{"not ready, pod tolerates not-ready", mkNode("n", "1", "1Gi", ready("False")), nil,
			mkPod("p", "", "", tolerate("node.kubernetes.io/not-ready", "Exists", "", "")), nil},
		{"not ready with the taint already present is not tainted twice",
			mkNode("n", "1", "1Gi", ready("False"), taints(tnt("node.kubernetes.io/not-ready", "", "NoSchedule"))), nil,
			mkPod("p", "", "", tolerate("node.kubernetes.io/not-ready", "Equal", "", "NoSchedule")), nil},
		{"unschedulable is checked before taints", mkNode("n", "1", "1Gi", cordoned, ready("False")), nil, mkPod("p", "", ""),
			[]string{"node(s) were unschedulable"}},
	})
}

func TestFilterTaintToleration(t *testing.T) {
	gpu := taints(tnt("dedicated", "gpu", "NoSchedule"))
	runFilterCases(t, []filterCase{
		{"untolerated NoSchedule", mkNode("n", "1", "1Gi", gpu), nil, mkPod("p", "", ""),
			[]string{"node(s) had untolerated taint {dedicated: gpu}"}},
		{"untolerated NoExecute", mkNode("n", "1", "1Gi", taints(tnt("k", "v", "NoExecute"))), nil, mkPod("p", "", ""),
			[]string{"node(s) had untolerated taint {k: v}"}},
		{"PreferNoSchedule does not filter", mkNode("n", "1", "1Gi", taints(tnt("k", "v", "PreferNoSchedule"))), nil, mkPod("p", "", ""), nil},
		{"Equal with matching value", mkNode("n", "1", "1Gi", gpu), nil, mkPod("p", "", "", tolerate("dedicated", "Equal", "gpu", "NoSchedule")), nil},
		{"empty operator means Equal", mkNode("n", "1", "1Gi", gpu), nil, mkPod("p", "", "", tolerate("dedicated", "", "gpu", "NoSchedule")), nil},
		{"Equal with another value", mkNode("n", "1", "1Gi", gpu), nil, mkPod("p", "", "", tolerate("dedicated", "Equal", "cpu", "NoSchedule")),
			[]string{"node(s) had untolerated taint {dedicated: gpu}"}},
		{"Exists on the key", mkNode("n", "1", "1Gi", gpu), nil, mkPod("p", "", "", tolerate("dedicated", "Exists", "", "NoSchedule")), nil},
		{"empty key with Exists tolerates everything", mkNode("n", "1", "1Gi", gpu, taints(tnt("x", "", "NoExecute"))), nil,
			mkPod("p", "", "", tolerate("", "Exists", "", "")), nil},
		{"empty effect matches all effects", mkNode("n", "1", "1Gi", gpu), nil, mkPod("p", "", "", tolerate("dedicated", "Equal", "gpu", "")), nil},
		{"effect must match when given", mkNode("n", "1", "1Gi", gpu), nil, mkPod("p", "", "", tolerate("dedicated", "Equal", "gpu", "NoExecute")),
			[]string{"node(s) had untolerated taint {dedicated: gpu}"}},
		{"first untolerated taint is reported", mkNode("n", "1", "1Gi", gpu, taints(tnt("zone", "", "NoSchedule"))), nil,
			mkPod("p", "", "", tolerate("dedicated", "Exists", "", "")),
			[]string{"node(s) had untolerated taint {zone: }"}},
		{"unknown operator tolerates nothing", mkNode("n", "1", "1Gi", gpu), nil, mkPod("p", "", "", tolerate("dedicated", "Gt", "gpu", "")),
			[]string{"node(s) had untolerated taint {dedicated: gpu}"}},
	})
}

func TestFilterNodeAffinity(t *testing.T) {
	const reason = "node(s) didn't match Pod's node affinity/selector"
	n := mkNode("node-a", "1", "1Gi", labels("zone", "a", "disk", "ssd", "cores", "16"))
	no := []string{reason}
	fields := func(op string, values ...string) *corev1.NodeSelectorTerm {
		return &corev1.NodeSelectorTerm{MatchFields: []*corev1.NodeSelectorRequirement{expr("metadata.name", op, values...)}}
	}
	runFilterCases(t, []filterCase{
		{"nodeSelector matches", n, nil, mkPod("p", "", "", nodeSelector("zone", "a")), nil},
		{"nodeSelector value differs", n, nil, mkPod("p", "", "", nodeSelector("zone", "b")), no},
		{"nodeSelector label missing", n, nil, mkPod("p", "", "", nodeSelector("gpu", "true")), no},
		{"In", n, nil, mkPod("p", "", "", required(term(expr("zone", "In", "b", "a")))), nil},
		{"In misses", n, nil, mkPod("p", "", "", required(term(expr("zone", "In", "b")))), no},
		{"NotIn", n, nil, mkPod("p", "", "", required(term(expr("zone", "NotIn", "b")))), nil},
		{"NotIn hits", n, nil, mkPod("p", "", "", required(term(expr("zone", "NotIn", "a")))), no},
		{"NotIn on a missing label matches", n, nil, mkPod("p", "", "", required(term(expr("gpu", "NotIn", "x")))), nil},
		{"Exists", n, nil, mkPod("p", "", "", required(term(expr("disk", "Exists")))), nil},
		{"Exists misses", n, nil, mkPod("p", "", "", required(term(expr("gpu", "Exists")))), no},
		{"DoesNotExist", n, nil, mkPod("p", "", "", required(term(expr("gpu", "DoesNotExist")))), nil},
		{"DoesNotExist misses", n, nil, mkPod("p", "", "", required(term(expr("disk", "DoesNotExist")))), no},
		{"Gt", n, nil, mkPod("p", "", "", required(term(expr("cores", "Gt", "8")))), nil},
		{"Gt equal is not greater", n, nil, mkPod("p", "", "", required(term(expr("cores", "Gt", "16")))), no},
		{"Lt", n, nil, mkPod("p", "", "", required(term(expr("cores", "Lt", "32")))), nil},
		{"Lt misses", n, nil, mkPod("p", "", "", required(term(expr("cores", "Lt", "4")))), no},
		{"Gt on a non-numeric label", n, nil, mkPod("p", "", "", required(term(expr("zone", "Gt", "1")))), no},
		{"Gt with two values is invalid", n, nil, mkPod("p", "", "", required(term(expr("cores", "Gt", "1", "2")))), no},
		{"expressions are ANDed", n, nil, mkPod("p", "", "", required(term(expr("zone", "In", "a"), expr("disk", "In", "hdd")))), no},
		{"terms are ORed", n, nil, mkPod("p", "", "", required(term(expr("zone", "In", "b")), term(expr("disk", "In", "ssd")))), nil},
		{"an empty term matches nothing", n, nil, mkPod("p", "", "", required(term())), no},
		{"no terms matches nothing", n, nil, mkPod("p", "", "", required()), no},
		{"an invalid operator fails its term only", n, nil,
			mkPod("p", "", "", required(term(expr("zone", "Like", "a")), term(expr("zone", "In", "a")))), nil},
		{"selector and affinity must both match", n, nil,
			mkPod("p", "", "", nodeSelector("zone", "b"), required(term(expr("zone", "In", "a")))), no},
		{"matchFields metadata.name In", n, nil, mkPod("p", "", "", required(fields("In", "node-a"))), nil},
		{"matchFields metadata.name In another", n, nil, mkPod("p", "", "", required(fields("In", "node-b"))), no},
		{"matchFields metadata.name NotIn", n, nil, mkPod("p", "", "", required(fields("NotIn", "node-a"))), no},
		{"matchFields ANDed with expressions", n, nil, mkPod("p", "", "", required(&corev1.NodeSelectorTerm{
			MatchExpressions: []*corev1.NodeSelectorRequirement{expr("zone", "In", "a")},
			MatchFields:      []*corev1.NodeSelectorRequirement{expr("metadata.name", "In", "node-a")},
		})), nil},
		{"preferred terms do not filter", n, nil, mkPod("p", "", "", preferred(10, term(expr("zone", "In", "b")))), nil},
	})
}

func TestFilterNodePorts(t *testing.T) {
	const reason = "node(s) didn't have free ports for the requested pod ports"
	n := mkNode("n", "4", "4Gi")
	used := func(port int32, proto, ip string) []*corev1.Pod {
		return []*corev1.Pod{mkPod("used", "", "", onNode("n"), hostPort(port, proto, ip))}
	}
	runFilterCases(t, []filterCase{
		{"free port", n, used(80, "TCP", ""), mkPod("p", "", "", hostPort(8080, "TCP", "")), nil},
		{"same port, protocol and all IPs", n, used(80, "TCP", ""), mkPod("p", "", "", hostPort(80, "TCP", "")), []string{reason}},
		{"empty protocol is TCP", n, used(80, "", ""), mkPod("p", "", "", hostPort(80, "TCP", "0.0.0.0")), []string{reason}},
		{"other protocol", n, used(53, "TCP", ""), mkPod("p", "", "", hostPort(53, "UDP", "")), nil},
		{"different specific IPs", n, used(80, "TCP", "10.0.0.1"), mkPod("p", "", "", hostPort(80, "TCP", "10.0.0.2")), nil},
		{"same specific IP", n, used(80, "TCP", "10.0.0.1"), mkPod("p", "", "", hostPort(80, "TCP", "10.0.0.1")), []string{reason}},
		{"wildcard against a specific IP", n, used(80, "TCP", "10.0.0.1"), mkPod("p", "", "", hostPort(80, "TCP", "")), []string{reason}},
		{"specific IP against a wildcard", n, used(80, "TCP", ""), mkPod("p", "", "", hostPort(80, "TCP", "10.0.0.1")), []string{reason}},
		{"container ports without host ports never conflict", n, used(80, "TCP", ""),
			mkPod("p", "", "", func(p *corev1.Pod) {
				p.Spec.Containers[0].Ports = []*corev1.ContainerPort{{ContainerPort: 80}}
			}), nil},
	})
}

func TestFilterNodeResourcesFit(t *testing.T) {
	n := mkNode("n", "2", "2Gi", maxPods("2"), func(n *corev1.Node) { n.Status.Allocatable["ephemeral-storage"] = "1Gi" })
	half := []*corev1.Pod{mkPod("a", "1", "1Gi", onNode("n"))}
	eph := func(q string) podOpt {
		return func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Requests["ephemeral-storage"] = q }
	}
	runFilterCases(t, []filterCase{
		{"fits exactly", n, half, mkPod("p", "1", "1Gi"), nil},
		{"insufficient cpu", n, half, mkPod("p", "1001m", "1Gi"), []string{"Insufficient cpu"}},
		{"insufficient memory", n, half, mkPod("p", "1", "1025Mi"), []string{"Insufficient memory"}},
		{"insufficient cpu and memory", n, half, mkPod("p", "2", "2Gi"), []string{"Insufficient cpu", "Insufficient memory"}},
		{"insufficient ephemeral-storage", n, nil, mkPod("p", "", "", eph("2Gi")), []string{"Insufficient ephemeral-storage"}},
		{"too many pods", n, []*corev1.Pod{mkPod("a", "", "", onNode("n")), mkPod("b", "", "", onNode("n"))},
			mkPod("p", "", ""), []string{"Too many pods"}},
		{"too many pods reported before resources", n,
			[]*corev1.Pod{mkPod("a", "1", "", onNode("n")), mkPod("b", "1", "", onNode("n"))},
			mkPod("p", "1", ""), []string{"Too many pods", "Insufficient cpu"}},
		{"a pod requesting nothing fits a full node", n, []*corev1.Pod{mkPod("a", "2", "2Gi", onNode("n"))}, mkPod("p", "", ""), nil},
		{"init containers count", n, half, mkPod("p", "100m", "", func(p *corev1.Pod) {
			p.Spec.InitContainers = []*corev1.Container{ctr("init", map[string]string{"cpu": "1500m"}, nil)}
		}), []string{"Insufficient cpu"}},
	})
}

// TestFilterPodOverhead: a pod's overhead (its RuntimeClass's, copied into
// spec.overhead by admission) counts with its requests, as kube-scheduler's
// resourcehelper.PodRequests adds it: for the pod being placed and for the
// node's pods alike, extended resources included.
func TestFilterPodOverhead(t *testing.T) {
	const fake = "example.com/fakecpu"
	n := mkNode("n", "2", "2Gi", func(n *corev1.Node) { n.Status.Allocatable[fake] = "10" })
	overhead := func(kv ...string) podOpt {
		return func(p *corev1.Pod) {
			p.Spec.Overhead = map[string]string{}
			for i := 0; i+1 < len(kv); i += 2 {
				p.Spec.Overhead[kv[i]] = kv[i+1]
			}
		}
	}
	half := []*corev1.Pod{mkPod("a", "1", "1Gi", onNode("n"))}
	runFilterCases(t, []filterCase{
		{"fits without its overhead", n, half, mkPod("p", "1", "1Gi"), nil},
		{"its overhead does not fit", n, half, mkPod("p", "1", "1Gi", overhead("cpu", "250m", "memory", "120Mi")),
			[]string{"Insufficient cpu", "Insufficient memory"}},
		{"an overhead alone", n, half, mkPod("p", "", "", overhead("cpu", "1001m")), []string{"Insufficient cpu"}},
		{"the node's pods' overhead counts", n, []*corev1.Pod{mkPod("a", "1", "1Gi", onNode("n"), overhead("cpu", "500m"))},
			mkPod("p", "600m", ""), []string{"Insufficient cpu"}},
		{"an extended resource overhead", n, nil, mkPod("p", "", "", overhead(fake, "11")), []string{"Insufficient " + fake}},
	})
}

// TestFilterExtendedResources: scalar resources (an extended resource a
// client advertised through nodes/status, hugepages) are filtered as
// kube-scheduler's NodeResourcesFit does: a node that does not offer one
// has none; the node's pods' requests count; the limit stands in for a
// missing request; after the standard reasons, in name order.
func TestFilterExtendedResources(t *testing.T) {
	const fake = "example.com/fakecpu"
	offers := func(kv ...string) nodeOpt {
		return func(n *corev1.Node) {
			for i := 0; i+1 < len(kv); i += 2 {
				n.Status.Allocatable[kv[i]] = kv[i+1]
			}
		}
	}
	wants := func(kv ...string) podOpt {
		return func(p *corev1.Pod) {
			for i := 0; i+1 < len(kv); i += 2 {
				p.Spec.Containers[0].Resources.Requests[kv[i]] = kv[i+1]
			}
		}
	}
	limits := func(name, q string) podOpt {
		return func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Limits = map[string]string{name: q} }
	}
	n := mkNode("n", "2", "2Gi", offers(fake, "1k", "hugepages-2Mi", "4Mi"))
	runFilterCases(t, []filterCase{
		{"fits", n, nil, mkPod("p", "", "", wants(fake, "1k")), nil},
		{"not offered", mkNode("n", "2", "2Gi"), nil, mkPod("p", "", "", wants(fake, "1")), []string{"Insufficient " + fake}},
		{"too much", n, nil, mkPod("p", "", "", wants(fake, "1001")), []string{"Insufficient " + fake}},
		{"taken by the node's pods", n, []*corev1.Pod{mkPod("a", "", "", onNode("n"), wants(fake, "600"))},
			mkPod("p", "", "", wants(fake, "500")), []string{"Insufficient " + fake}},
		{"the rest fits", n, []*corev1.Pod{mkPod("a", "", "", onNode("n"), wants(fake, "600"))},
			mkPod("p", "", "", wants(fake, "400")), nil},
		{"limit stands in for the request", n, nil, mkPod("p", "", "", limits(fake, "2k")), []string{"Insufficient " + fake}},
		{"hugepages", n, nil, mkPod("p", "", "", wants("hugepages-2Mi", "6Mi")), []string{"Insufficient hugepages-2Mi"}},
		{"after the standard reasons, in name order", n, nil, mkPod("p", "3", "", wants(fake, "2k", "hugepages-2Mi", "6Mi")),
			[]string{"Insufficient cpu", "Insufficient " + fake, "Insufficient hugepages-2Mi"}},
		{"an unprefixed unknown resource is not scalar", mkNode("n", "2", "2Gi"), nil, mkPod("p", "", "", wants("widgets", "5")), nil},
	})
}

func TestFilterNodeName(t *testing.T) {
	runFilterCases(t, []filterCase{
		{"matching spec.nodeName", mkNode("n", "1", "1Gi"), nil, mkPod("p", "", "", onNode("n")), nil},
		{"other spec.nodeName", mkNode("n", "1", "1Gi"), nil, mkPod("p", "", "", onNode("m")),
			[]string{"node(s) didn't match the requested node name"}},
	})
}
