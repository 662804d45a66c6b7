package scheduler

import (
	"maps"
	"testing"

	"github.com/podflow/podflow/services/stages/scheduler/framework"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/podtopologyspread"

	"github.com/podflow/podflow/proto/corev1"
)

// Cases after kube-scheduler's podtopologyspread filtering_test.go and
// scoring_test.go, and the topology-spread page's examples.

var (
	fooSel = exists("foo")
	spread = podtopologyspread.PodTopologySpread{}
)

func fourNodesTwoZones(opts ...nodeOpt) []*corev1.Node {
	return []*corev1.Node{
		zoneNode("node-a", "zone1", opts...), zoneNode("node-b", "zone1", opts...),
		zoneNode("node-x", "zone2", opts...), zoneNode("node-y", "zone2", opts...),
	}
}

func TestPodTopologySpreadFilter(t *testing.T) {
	const skew, missing = podtopologyspread.ReasonTopologySpread, podtopologyspread.ReasonTopologySpreadMissingLabel
	foo := podLabels("foo", "")
	concat := func(ps ...[]*corev1.Pod) []*corev1.Pod {
		var out []*corev1.Pod
		for _, p := range ps {
			out = append(out, p...)
		}
		return out
	}
	tests := []struct {
		name  string
		pod   *corev1.Pod
		nodes []*corev1.Node
		pods  []*corev1.Pod
		want  map[string]string // rejected nodes
	}{
		{
			name:  "no existing pods",
			pod:   mkPod("p", "", "", foo, spreadBy(1, "zone", "DoNotSchedule", fooSel)),
			nodes: fourNodesTwoZones(),
			want:  map[string]string{},
		},
		{
			name:  "no existing pods, incoming pod doesn't match itself",
			pod:   mkPod("p", "", "", spreadBy(1, "zone", "DoNotSchedule", fooSel)),
			nodes: fourNodesTwoZones(),
			want:  map[string]string{},
		},
		{
			name:  "pods in a different namespace do not count",
			pod:   mkPod("p", "", "", foo, spreadBy(1, "zone", "DoNotSchedule", fooSel)),
			nodes: fourNodesTwoZones(),
			pods:  concat(placed("node-a", 2, foo, inNamespace("other"))),
			want:  map[string]string{},
		},
		{
			name:  "pods spread across zones as 3/3, all nodes fit",
			pod:   mkPod("p", "", "", foo, spreadBy(1, "zone", "DoNotSchedule", fooSel)),
			nodes: fourNodesTwoZones(),
			pods:  concat(placed("node-a", 2, foo), placed("node-b", 1, foo), placed("node-x", 1, foo), placed("node-y", 2, foo)),
			want:  map[string]string{},
		},
		{
			// The topology-spread page's first example: zoneA holds 2, zoneB 1.
			name:  "pods spread across zones as 2/1: only zone2 fits",
			pod:   mkPod("p", "", "", foo, spreadBy(1, "zone", "DoNotSchedule", fooSel)),
			nodes: fourNodesTwoZones(),
			pods:  concat(placed("node-a", 1, foo), placed("node-b", 1, foo), placed("node-x", 1, foo)),
			want:  map[string]string{"node-a": skew, "node-b": skew},
		},
		{
			name:  "a node without the zone label is not counted and fails",
			pod:   mkPod("p", "", "", foo, spreadBy(1, "zone", "DoNotSchedule", fooSel)),
			nodes: []*corev1.Node{zoneNode("node-a", "zone1"), zoneNode("node-b", ""), zoneNode("node-x", "zone2")},
			pods:  concat(placed("node-a", 1, foo), placed("node-b", 5, foo)),
			want:  map[string]string{"node-a": skew, "node-b": missing},
		},
		{
			name:  "no node has label rack",
			pod:   mkPod("p", "", "", foo, spreadBy(1, "rack", "DoNotSchedule", fooSel)),
			nodes: fourNodesTwoZones(),
			want:  map[string]string{"node-a": missing, "node-b": missing, "node-x": missing, "node-y": missing},
		},
		{
			name:  "pods spread across nodes as 2/1/0/3, only node-x fits",
			pod:   mkPod("p", "", "", foo, spreadBy(1, podtopologyspread.LabelHostname, "DoNotSchedule", fooSel)),
			nodes: fourNodesTwoZones(),
			pods:  concat(placed("node-a", 2, foo), placed("node-b", 1, foo), placed("node-y", 3, foo)),
			want:  map[string]string{"node-a": skew, "node-b": skew, "node-y": skew},
		},
		{
			name:  "pods spread across nodes as 2/1/0/3, maxSkew 2: node-b and node-x fit",
			pod:   mkPod("p", "", "", foo, spreadBy(2, podtopologyspread.LabelHostname, "DoNotSchedule", fooSel)),
			nodes: fourNodesTwoZones(),
			pods:  concat(placed("node-a", 2, foo), placed("node-b", 1, foo), placed("node-y", 3, foo)),
			want:  map[string]string{"node-a": skew, "node-y": skew},
		},
		{
			name:  "pods spread as 2/1/0/3, the incoming pod does not match itself: node-b fits too",
			pod:   mkPod("p", "", "", podLabels("bar", ""), spreadBy(1, podtopologyspread.LabelHostname, "DoNotSchedule", fooSel)),
			nodes: fourNodesTwoZones(),
			pods:  concat(placed("node-a", 2, foo), placed("node-b", 1, foo), placed("node-y", 3, foo)),
			want:  map[string]string{"node-a": skew, "node-y": skew},
		},
		{
			name: "node affinity leaves out node-b and node-x: min is 2, node-a fits",
			pod: mkPod("p", "", "", foo, spreadBy(1, podtopologyspread.LabelHostname, "DoNotSchedule", fooSel),
				required(term(expr(podtopologyspread.LabelHostname, "NotIn", "node-b", "node-x")))),
			nodes: fourNodesTwoZones(),
			pods:  concat(placed("node-a", 2, foo), placed("node-b", 1, foo), placed("node-y", 3, foo)),
			want:  map[string]string{"node-y": skew}, // node-b and node-x are NodeAffinity's to reject
		},
		{
			name: "nodeAffinityPolicy Ignore counts every node: min is 0",
			pod: mkPod("p", "", "", foo, required(term(expr(podtopologyspread.LabelHostname, "NotIn", "node-b", "node-x"))),
				spreadBy(1, podtopologyspread.LabelHostname, "DoNotSchedule", fooSel, func(c *corev1.TopologySpreadConstraint) { c.NodeAffinityPolicy = ptr("Ignore") })),
			nodes: fourNodesTwoZones(),
			pods:  concat(placed("node-a", 2, foo), placed("node-b", 1, foo), placed("node-y", 3, foo)),
			want:  map[string]string{"node-a": skew, "node-b": skew, "node-y": skew},
		},
		{
			name: "nodeTaintsPolicy Honor leaves out the tainted empty zone",
			pod: mkPod("p", "", "", foo,
				spreadBy(1, "zone", "DoNotSchedule", fooSel, func(c *corev1.TopologySpreadConstraint) { c.NodeTaintsPolicy = ptr("Honor") })),
			nodes: []*corev1.Node{zoneNode("node-a", "zone1"), zoneNode("node-x", "zone2"), zoneNode("node-t", "zone3", taints(tnt("k", "v", "NoSchedule")))},
			pods:  concat(placed("node-a", 1, foo), placed("node-x", 1, foo)),
			want:  map[string]string{}, // with zone3 counted (Ignore) zone1 and zone2 would fail
		},
		{
			name:  "nodeTaintsPolicy Ignore (default) counts the tainted empty zone",
			pod:   mkPod("p", "", "", foo, spreadBy(1, "zone", "DoNotSchedule", fooSel)),
			nodes: []*corev1.Node{zoneNode("node-a", "zone1"), zoneNode("node-x", "zone2"), zoneNode("node-t", "zone3", taints(tnt("k", "v", "NoSchedule")))},
			pods:  concat(placed("node-a", 1, foo), placed("node-x", 1, foo)),
			want:  map[string]string{"node-a": skew, "node-x": skew},
		},
		{
			name: "minDomains 3 with 2 domains: the global minimum is 0",
			pod: mkPod("p", "", "", foo,
				spreadBy(1, "zone", "DoNotSchedule", fooSel, func(c *corev1.TopologySpreadConstraint) { c.MinDomains = ptr(int32(3)) })),
			nodes: fourNodesTwoZones(),
			pods:  concat(placed("node-a", 1, foo), placed("node-x", 1, foo)),
			want:  map[string]string{"node-a": skew, "node-b": skew, "node-x": skew, "node-y": skew},
		},
		{
			name: "minDomains 2 with 2 domains: the real minimum",
			pod: mkPod("p", "", "", foo,
				spreadBy(1, "zone", "DoNotSchedule", fooSel, func(c *corev1.TopologySpreadConstraint) { c.MinDomains = ptr(int32(2)) })),
			nodes: fourNodesTwoZones(),
			pods:  concat(placed("node-a", 1, foo), placed("node-x", 1, foo)),
			want:  map[string]string{},
		},
		{
			name: "matchLabelKeys: only pods of the same revision count",
			pod: mkPod("p", "", "", podLabels("foo", "", "rev", "2"),
				spreadBy(1, "zone", "DoNotSchedule", fooSel, func(c *corev1.TopologySpreadConstraint) { c.MatchLabelKeys = []string{"rev"} })),
			nodes: fourNodesTwoZones(),
			pods:  concat(placed("node-a", 3, podLabels("foo", "", "rev", "1")), placed("node-x", 1, podLabels("foo", "", "rev", "2"))),
			want:  map[string]string{"node-x": skew, "node-y": skew},
		},
		{
			name:  "terminating pods do not count",
			pod:   mkPod("p", "", "", foo, spreadBy(1, "zone", "DoNotSchedule", fooSel)),
			nodes: fourNodesTwoZones(),
			pods:  concat(placed("node-a", 2, foo, terminating)),
			want:  map[string]string{},
		},
		{
			name: "two constraints: zone and node",
			pod: mkPod("p", "", "", foo, spreadBy(1, "zone", "DoNotSchedule", fooSel),
				spreadBy(1, podtopologyspread.LabelHostname, "DoNotSchedule", fooSel)),
			nodes: fourNodesTwoZones(),
			// zone1: 2 (a: 2, b: 0), zone2: 1 (x: 1, y: 0)
			pods: concat(placed("node-a", 2, foo), placed("node-x", 1, foo)),
			want: map[string]string{"node-a": skew, "node-b": skew, "node-x": skew},
		},
		{
			name:  "a ScheduleAnyway constraint does not filter",
			pod:   mkPod("p", "", "", foo, spreadBy(1, "zone", "ScheduleAnyway", fooSel)),
			nodes: fourNodesTwoZones(),
			pods:  concat(placed("node-a", 5, foo)),
			want:  map[string]string{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runPluginFilter(t, spread, tt.pod, tt.nodes, tt.pods)
			if !maps.Equal(got, tt.want) {
				t.Errorf("rejected %v, want %v", got, tt.want)
			}
		})
	}
}

func TestPodTopologySpreadScore(t *testing.T) {
	foo := podLabels("foo", "")
	tests := []struct {
		name  string
		pod   *corev1.Pod
		nodes []*corev1.Node
		pods  []*corev1.Pod
		want  map[string]int64
	}{
		{
			name:  "one constraint on node, no existing pods",
			pod:   mkPod("p", "", "", foo, spreadBy(1, podtopologyspread.LabelHostname, "ScheduleAnyway", fooSel)),
			nodes: []*corev1.Node{zoneNode("node-a", "zone1"), zoneNode("node-b", "zone1")},
			want:  map[string]int64{"node-a": 100, "node-b": 100},
		},
		{
			// log(4+2) = 1.79: raw scores 0, 2 (1.79), 4 (3.58 → 4), 5 (5.38 → 5)... (kube-scheduler's
			// "one constraint on node, all 4 nodes are candidates": 0/1/2/3 pods).
			name:  "one constraint on node, all 4 nodes are candidates",
			pod:   mkPod("p", "", "", foo, spreadBy(1, podtopologyspread.LabelHostname, "ScheduleAnyway", fooSel)),
			nodes: fourNodesTwoZones(),
			pods:  append(append(placed("node-b", 1, foo), placed("node-x", 2, foo)...), placed("node-y", 3, foo)...),
			// raw: a 0, b round(1.79)=2, x round(3.58)=4, y round(5.38)=5; 100*(5+0-s)/5
			want: map[string]int64{"node-a": 100, "node-b": 60, "node-x": 20, "node-y": 0},
		},
		{
			name:  "zones: the emptier zone scores higher; nodes without the key score 0",
			pod:   mkPod("p", "", "", foo, spreadBy(1, "zone", "ScheduleAnyway", fooSel)),
			nodes: []*corev1.Node{zoneNode("node-a", "zone1"), zoneNode("node-x", "zone2"), zoneNode("node-n", "")},
			// log(2+2)=1.386: zone1 4 pods → 5.5 → 6; zone2 1 pod → 1.386 → 1
			pods: append(placed("node-a", 4, foo), placed("node-x", 1, foo)...),
			want: map[string]int64{"node-a": 16, "node-x": 100, "node-n": 0},
		},
		{
			name:  "a DoNotSchedule constraint does not score",
			pod:   mkPod("p", "", "", foo, spreadBy(1, "zone", "DoNotSchedule", fooSel)),
			nodes: fourNodesTwoZones(),
			pods:  placed("node-a", 4, foo),
			want:  map[string]int64{"node-a": 0, "node-b": 0, "node-x": 0, "node-y": 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runPluginScore(t, spread, tt.pod, tt.nodes, tt.pods)
			if !maps.Equal(got, tt.want) {
				t.Errorf("scores %v, want %v", got, tt.want)
			}
		})
	}
}

// TestPodTopologySpreadSchedule spreads 6 replicas over 2 zones of 2 nodes
// with maxSkew 1 through Schedule and AssumePod: 3 per zone; then 5
// replicas spread by hostname within zone1: 3 and 2.
func TestPodTopologySpreadSchedule(t *testing.T) {
	c := cacheWith(t, fourNodesTwoZones())
	s := newTestScheduler(t)
	snap := framework.NewSnapshot()
	perZone := map[string]int{}
	for i := range 6 {
		pod := mkPod(fmtName("web", i), "100m", "64Mi", podLabels("app", "web"), spreadBy(1, "zone", "DoNotSchedule", exists("app")))
		c.UpdateSnapshot(snap)
		res, err := s.Schedule(pod, snap)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AssumePod(pod, res.Node); err != nil {
			t.Fatal(err)
		}
		n, _ := snap.Get(res.Node)
		perZone[n.Labels()["zone"]]++
	}
	if perZone["zone1"] != 3 || perZone["zone2"] != 3 {
		t.Errorf("replicas per zone %v, want 3 and 3", perZone)
	}
	// Five replicas spread by hostname over zone1's two nodes: 3 and 2.
	one := exists("one")
	for i := range 5 {
		pod := mkPod(fmtName("one", i), "100m", "64Mi", podLabels("one", "x"), spreadBy(1, podtopologyspread.LabelHostname, "DoNotSchedule", one),
			required(term(expr("zone", "In", "zone1"))))
		c.UpdateSnapshot(snap)
		res, err := s.Schedule(pod, snap)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.AssumePod(pod, res.Node); err != nil {
			t.Fatal(err)
		}
	}
	c.UpdateSnapshot(snap)
	a, _ := snap.Get("node-a")
	b, _ := snap.Get("node-b")
	sel := framework.NewLabelSelector(one, nil, nil, nil)
	if ca, cb := podtopologyspread.CountMatching(a, &sel, "default"), podtopologyspread.CountMatching(b, &sel, "default"); ca+cb != 5 || ca-cb > 1 || cb-ca > 1 {
		t.Errorf("node-a %d, node-b %d: want 5 spread with skew at most 1", ca, cb)
	}
}
