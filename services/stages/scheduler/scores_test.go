package scheduler

import (
	"testing"

	"github.com/podflow/podflow/services/stages/scheduler/framework"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/balancedallocation"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/imagelocality"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/nodeaffinity"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/noderesourcesfit"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/tainttoleration"

	"github.com/podflow/podflow/proto/corev1"
)

// scoreOf runs one score plugin's PreScore and Score for pod on n, in a
// cycle over snap (nil: none); 0 when PreScore skips.
func scoreOf(t *testing.T, pl framework.ScorePlugin, pod *corev1.Pod, snap *framework.Snapshot, n *framework.NodeInfo) int64 {
	t.Helper()
	var state framework.CycleState
	state.Reset(snap)
	if ps, ok := pl.(framework.PreScorePlugin); ok {
		switch st := ps.PreScore(&state, pod, []*framework.NodeInfo{n}); {
		case st.IsSkip():
			return 0
		case !st.IsSuccess():
			t.Fatal(st.AsError())
		}
	}
	return pl.Score(&state, pod, n)
}

// skipsBalancedAllocation reports whether BalancedAllocation's PreScore
// skips the pod.
func skipsBalancedAllocation(t *testing.T, pod *corev1.Pod) bool {
	t.Helper()
	var state framework.CycleState
	st := balancedallocation.BalancedAllocation{}.PreScore(&state, pod, nil)
	if !st.IsSuccess() && !st.IsSkip() {
		t.Fatal(st.AsError())
	}
	return st.IsSkip()
}

func TestLeastAllocatedScore(t *testing.T) {
	tests := []struct {
		name string
		node *corev1.Node
		on   []*corev1.Pod
		pod  *corev1.Pod
		want int64
	}{
		{"half used after the pod", mkNode("n", "4", "8Gi"), []*corev1.Pod{mkPod("a", "1", "2Gi", onNode("n"))}, mkPod("p", "1", "2Gi"), 50},
		{"empty node, pod requesting nothing counts 100m and 200Mi", mkNode("n", "1", "1Gi"), nil, mkPod("p", "", ""), (90 + 80) / 2},
		{"over-full resource scores 0", mkNode("n", "1", "4Gi"), nil, mkPod("p", "2", "1Gi"), (0 + 75) / 2},
		{"a resource the node lacks is left out", mkNode("n", "4", "0"), nil, mkPod("p", "1", ""), 75},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := scoreOf(t, noderesourcesfit.Fit{}, tt.pod, nil, infoOf(t, tt.node, tt.on...)); got != tt.want {
				t.Errorf("leastAllocated = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestBalancedAllocationScore(t *testing.T) {
	tests := []struct {
		name string
		node *corev1.Node
		on   []*corev1.Pod
		pod  *corev1.Pod
		want int64
	}{
		{"equal fractions", mkNode("n", "4", "8Gi"), nil, mkPod("p", "1", "2Gi"), 100},
		{"cpu 0.5 memory 0.125", mkNode("n", "4", "8Gi"), nil, mkPod("p", "2", "1Gi"), 81},
		{"existing pods count", mkNode("n", "4", "8Gi"), []*corev1.Pod{mkPod("a", "2", "", onNode("n"))}, mkPod("p", "", "4Gi"), 100},
		{"fractions are capped at 1", mkNode("n", "4", "8Gi"), nil, mkPod("p", "8", "0"), 50},
		{"one resource offered is balanced", mkNode("n", "4", "0"), nil, mkPod("p", "1", "1Gi"), 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := scoreOf(t, balancedallocation.BalancedAllocation{}, tt.pod, nil, infoOf(t, tt.node, tt.on...)); got != tt.want {
				t.Errorf("balancedAllocation = %d, want %d", got, tt.want)
			}
		})
	}
	if !skipsBalancedAllocation(t, mkPod("p", "", "")) || skipsBalancedAllocation(t, mkPod("p", "1m", "")) {
		t.Error("bestEffort: want true only for a pod without cpu and memory requests")
	}
}

func TestImageLocalityScore(t *testing.T) {
	const mib = 1024 * 1024
	tests := []struct {
		name  string
		nodes []*corev1.Node // the first is scored
		pod   *corev1.Pod
		want  int64
	}{
		{"image on half the nodes: 300 MiB scaled to 150",
			[]*corev1.Node{mkNode("a", "1", "1Gi", images(300*mib, "app:latest")), mkNode("b", "1", "1Gi")},
			mkPod("p", "", "", image("app")), 100 * (150 - 23) / (1000 - 23)},
		{"image on every node is not scaled down",
			[]*corev1.Node{mkNode("a", "1", "1Gi", images(300*mib, "app:v1")), mkNode("b", "1", "1Gi", images(300*mib, "app:v1"))},
			mkPod("p", "", "", image("app:v1")), 100 * (300 - 23) / (1000 - 23)},
		{"below the 23 MiB threshold",
			[]*corev1.Node{mkNode("a", "1", "1Gi", images(20*mib, "app:latest"))}, mkPod("p", "", "", image("app")), 0},
		{"above 1000 MiB per container",
			[]*corev1.Node{mkNode("a", "1", "1Gi", images(2000*mib, "app:latest"))}, mkPod("p", "", "", image("app")), 100},
		{"image absent",
			[]*corev1.Node{mkNode("a", "1", "1Gi", images(300*mib, "other:latest")), mkNode("b", "1", "1Gi", images(300*mib, "app:latest"))},
			mkPod("p", "", "", image("app")), 0},
		{"registry port is not a tag",
			[]*corev1.Node{mkNode("a", "1", "1Gi", images(1000*mib, "reg:5000/app:latest"))}, mkPod("p", "", "", image("reg:5000/app")), 100},
		{"any of an image's names matches",
			[]*corev1.Node{mkNode("a", "1", "1Gi", images(1000*mib, "docker.io/library/app:latest", "app:latest"))}, mkPod("p", "", "", image("app")), 100},
		{"init containers count toward the sum and the threshold",
			[]*corev1.Node{mkNode("a", "1", "1Gi", images(1000*mib, "app:latest"), images(500*mib, "init:latest"))},
			mkPod("p", "", "", image("app"), func(p *corev1.Pod) {
				p.Spec.InitContainers = []*corev1.Container{{Name: "i", Image: "init"}}
			}), 100 * (1500 - 23) / (2000 - 23)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cacheWith(t, tt.nodes)
			snap := c.Snapshot()
			n, _ := snap.Get(tt.nodes[0].Metadata.Name)
			if got := scoreOf(t, imagelocality.ImageLocality{}, tt.pod, snap, n); got != tt.want {
				t.Errorf("imageLocality = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestNodeAffinityAndTaintRawScores(t *testing.T) {
	n := infoOf(t, mkNode("n", "1", "1Gi", labels("zone", "a", "disk", "ssd"),
		taints(tnt("a", "1", "PreferNoSchedule"), tnt("b", "", "PreferNoSchedule"), tnt("c", "", "NoSchedule"))))
	tests := []struct {
		name               string
		pod                *corev1.Pod
		affinity, intolera int64
	}{
		{"nothing", mkPod("p", "", ""), 0, 2},
		{"matching preferred terms sum their weights", mkPod("p", "", "",
			preferred(5, term(expr("zone", "In", "a"))), preferred(7, term(expr("disk", "Exists"))), preferred(11, term(expr("zone", "In", "b")))), 12, 2},
		{"tolerating one PreferNoSchedule taint", mkPod("p", "", "", tolerate("a", "Equal", "1", "PreferNoSchedule")), 0, 1},
		{"a toleration with empty effect counts", mkPod("p", "", "", tolerate("b", "Exists", "", "")), 0, 1},
		{"a NoSchedule toleration does not", mkPod("p", "", "", tolerate("b", "Exists", "", "NoSchedule")), 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if a, i := scoreOf(t, nodeaffinity.NodeAffinity{}, tt.pod, nil, n), scoreOf(t, tainttoleration.TaintToleration{}, tt.pod, nil, n); a != tt.affinity || i != tt.intolera {
				t.Errorf("nodeAffinity, intolerable = %d, %d; want %d, %d", a, i, tt.affinity, tt.intolera)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	tests := []struct {
		name    string
		in      []int64
		reverse bool
		want    []int64
	}{
		{"scaled to the max", []int64{0, 5, 10}, false, []int64{0, 50, 100}},
		{"reversed", []int64{0, 1, 4}, true, []int64{100, 75, 0}},
		{"all zero", []int64{0, 0}, false, []int64{0, 0}},
		{"all zero reversed", []int64{0, 0}, true, []int64{100, 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := append([]int64(nil), tt.in...)
			framework.DefaultNormalizeScore(framework.MaxNodeScore, tt.reverse, got)
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("DefaultNormalizeScore(%v) = %v, want %v", tt.in, got, tt.want)
				}
			}
		})
	}
}

// TestSchedulePrefers checks that each score moves the choice on its own.
func TestSchedulePrefers(t *testing.T) {
	const mib = 1024 * 1024
	tests := []struct {
		name  string
		nodes []*corev1.Node
		on    []*corev1.Pod
		pod   *corev1.Pod
		want  string
	}{
		{"least allocated", []*corev1.Node{mkNode("busy", "4", "8Gi"), mkNode("idle", "4", "8Gi")},
			[]*corev1.Pod{mkPod("a", "2", "4Gi", onNode("busy"))}, mkPod("p", "500m", "1Gi"), "idle"},
		{"preferred node affinity", []*corev1.Node{mkNode("a", "4", "8Gi"), mkNode("b", "4", "8Gi", labels("zone", "b"))},
			nil, mkPod("p", "", "", preferred(1, term(expr("zone", "In", "b")))), "b"},
		{"no untolerated PreferNoSchedule taint", []*corev1.Node{mkNode("a", "4", "8Gi", taints(tnt("spot", "", "PreferNoSchedule"))), mkNode("b", "4", "8Gi")},
			nil, mkPod("p", "", ""), "b"},
		{"image locality", []*corev1.Node{mkNode("a", "4", "8Gi"), mkNode("b", "4", "8Gi", images(900*mib, "app:latest"))},
			nil, mkPod("p", "", "", image("app")), "b"},
		{"balanced allocation", []*corev1.Node{mkNode("a", "4", "8Gi"), mkNode("b", "4", "8Gi")},
			[]*corev1.Pod{mkPod("x", "2", "", onNode("a")), mkPod("y", "", "4Gi", onNode("b"))}, mkPod("p", "1", ""), "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 20; seed++ {
				s := newTestScheduler(t, func(c *Config) { c.Seed = seed })
				res, err := s.Schedule(tt.pod, cacheWith(t, tt.nodes, tt.on...).Snapshot())
				if err != nil {
					t.Fatal(err)
				}
				if res.Node != tt.want {
					t.Fatalf("seed %d: node = %q, want %q; scores %v", seed, res.Node, tt.want, res.Scores)
				}
			}
		})
	}
}
