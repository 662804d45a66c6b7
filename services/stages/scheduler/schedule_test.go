package scheduler

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/podflow/podflow/services/stages/scheduler/cache"
	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"github.com/podflow/podflow/proto/corev1"
)

func TestFitErrorMessage(t *testing.T) {
	tests := []struct {
		name    string
		nodes   int
		reasons map[string][]string
		want    string
	}{
		{"counts sorted as strings, as kube-scheduler does", 5, map[string][]string{
			"n1": {"Insufficient cpu"}, "n2": {"Insufficient cpu"}, "n3": {"Insufficient cpu"},
			"n4": {"node(s) had untolerated taint {dedicated: gpu}"}, "n5": {"node(s) had untolerated taint {dedicated: gpu}"},
		}, "0/5 nodes are available: 2 node(s) had untolerated taint {dedicated: gpu}, 3 Insufficient cpu."},
		{"several reasons per node each count", 2, map[string][]string{
			"n1": {"Insufficient cpu", "Insufficient memory"}, "n2": {"Insufficient memory"},
		}, "0/2 nodes are available: 1 Insufficient cpu, 2 Insufficient memory."},
		{"lexical, not numeric, order", 12, func() map[string][]string {
			m := map[string][]string{"x": {"node(s) were unschedulable"}, "y": {"node(s) were unschedulable"}}
			for i, n := range nodeNames("c", 10) {
				_ = i
				m[n] = []string{"Too many pods"}
			}
			return m
		}(), "0/12 nodes are available: 10 Too many pods, 2 node(s) were unschedulable."},
		{"no reasons", 0, nil, "0/0 nodes are available:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fe := &framework.FitError{NumAllNodes: tt.nodes, NodeReasons: tt.reasons}
			if got := fe.Error(); got != tt.want {
				t.Errorf("Error() =\n%q, want\n%q", got, tt.want)
			}
			if !errors.Is(fe, framework.ErrUnschedulable) {
				t.Error("FitError does not match ErrUnschedulable")
			}
		})
	}
}

func TestScheduleFitError(t *testing.T) {
	gpu := taints(tnt("dedicated", "gpu", "NoSchedule"))
	nodes := []*corev1.Node{
		mkNode("small-1", "500m", "8Gi"), mkNode("small-2", "500m", "8Gi"), mkNode("small-3", "500m", "8Gi"),
		mkNode("gpu-1", "8", "8Gi", gpu), mkNode("gpu-2", "8", "8Gi", gpu),
	}
	_, err := newTestScheduler(t).Schedule(mkPod("web", "1", "1Gi"), cacheWith(t, nodes).Snapshot())
	var fe *framework.FitError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v, want *FitError", err)
	}
	const want = "0/5 nodes are available: 2 node(s) had untolerated taint {dedicated: gpu}, 3 Insufficient cpu. preemption: 0/5 nodes are available: 2 Preemption is not helpful for scheduling, 3 No preemption victims found for incoming pod.."
	if fe.Error() != want {
		t.Errorf("message =\n%q, want\n%q", fe.Error(), want)
	}
	wantReasons := map[string][]string{
		"small-1": {"Insufficient cpu"}, "small-2": {"Insufficient cpu"}, "small-3": {"Insufficient cpu"},
		"gpu-1": {"node(s) had untolerated taint {dedicated: gpu}"}, "gpu-2": {"node(s) had untolerated taint {dedicated: gpu}"},
	}
	if !reflect.DeepEqual(fe.NodeReasons, wantReasons) || fe.Pod != "default/web" {
		t.Errorf("FitError = %q %v, want default/web %v", fe.Pod, fe.NodeReasons, wantReasons)
	}
}

func TestScheduleErrors(t *testing.T) {
	s := newTestScheduler(t)
	if _, err := s.Schedule(mkPod("p", "", ""), framework.NewSnapshot()); !errors.Is(err, framework.ErrNoNodesAvailable) {
		t.Errorf("empty snapshot: err = %v, want ErrNoNodesAvailable", err)
	}
	snap := cacheWith(t, []*corev1.Node{mkNode("n", "1", "1Gi")}).Snapshot()
	if _, err := s.Schedule(mkPod("p", "a lot", ""), snap); !errors.Is(err, framework.ErrInvalidObject) {
		t.Errorf("bad quantity: err = %v, want ErrInvalidObject", err)
	}
}

func TestNumFeasibleNodesToFind(t *testing.T) {
	tests := []struct {
		percentage int32
		nodes      int
		want       int
	}{
		{0, 0, 0},
		{0, 99, 99},    // small clusters are searched in full
		{0, 100, 100},  // 49% of 100 is under the 100 minimum
		{0, 150, 100},  // 49% = 73, raised to 100
		{0, 1000, 420}, // 50 - 8 = 42%
		{0, 5000, 500}, // 50 - 40 = 10%
		{0, 5625, 281}, // 50 - 45 = 5%
		{0, 6000, 300}, // 50 - 48 = 2%, floored at 5%
		{0, 20000, 1000},
		{30, 1000, 300}, // configured
		{30, 200, 100},  // configured, but at least 100
		{100, 5000, 5000},
	}
	for _, tt := range tests {
		if got := numFeasibleNodesToFind(tt.percentage, tt.nodes); got != tt.want {
			t.Errorf("numFeasibleNodesToFind(%d%%, %d) = %d, want %d", tt.percentage, tt.nodes, got, tt.want)
		}
	}
}

func uniformCluster(t testing.TB, names []string, opts ...nodeOpt) *cache.Cache {
	t.Helper()
	nodes := make([]*corev1.Node, len(names))
	for i, n := range names {
		nodes[i] = mkNode(n, "8", "32Gi", opts...)
	}
	return cacheWith(t, nodes)
}

func TestScheduleSamplesAndRotates(t *testing.T) {
	c := uniformCluster(t, nodeNames("n", 1000))
	snap := c.Snapshot()
	s := newTestScheduler(t)
	seen := map[string]bool{}
	for cycle, wantNext := range []int{420, 840, 260, 680, 100} {
		res, err := s.Schedule(mkPod("p", "100m", "100Mi"), snap)
		if err != nil {
			t.Fatal(err)
		}
		if res.FeasibleNodes != 420 || res.EvaluatedNodes != 420 {
			t.Errorf("cycle %d: feasible %d evaluated %d, want 420 and 420", cycle, res.FeasibleNodes, res.EvaluatedNodes)
		}
		if s.next != wantNext {
			t.Errorf("cycle %d: next start index %d, want %d", cycle, s.next, wantNext)
		}
		for _, n := range s.feasible { // the nodes the cycle scored
			seen[n.Name()] = true
		}
	}
	if len(seen) != 1000 {
		t.Errorf("rotation considered %d of 1000 nodes in 5 cycles", len(seen))
	}
}

func TestScheduleSamplingCountsInfeasibleNodes(t *testing.T) {
	// Every other node is cordoned: finding 420 feasible nodes evaluates 840.
	var nodes []*corev1.Node
	for i, n := range nodeNames("n", 1000) {
		if i%2 == 0 {
			nodes = append(nodes, mkNode(n, "8", "32Gi"))
		} else {
			nodes = append(nodes, mkNode(n, "8", "32Gi", cordoned))
		}
	}
	s := newTestScheduler(t)
	snap := cacheWith(t, nodes).Snapshot()
	res, err := s.Schedule(mkPod("p", "", ""), snap)
	if err != nil {
		t.Fatal(err)
	}
	if res.FeasibleNodes != 420 || res.EvaluatedNodes != 839 || s.next != 839 {
		t.Errorf("feasible %d evaluated %d next %d, want 420, 839, 839", res.FeasibleNodes, res.EvaluatedNodes, s.next)
	}
	// Only 500 are feasible: the next cycle wraps around and stops at 420 again.
	res, err = s.Schedule(mkPod("p", "", ""), snap)
	if err != nil {
		t.Fatal(err)
	}
	if res.FeasibleNodes != 420 || s.next != (839+res.EvaluatedNodes)%1000 {
		t.Errorf("second cycle: feasible %d evaluated %d next %d", res.FeasibleNodes, res.EvaluatedNodes, s.next)
	}
}

func TestScheduleFullPercentageEvaluatesAll(t *testing.T) {
	s := newTestScheduler(t, func(c *Config) { c.PercentageOfNodesToScore = 100 })
	res, err := s.Schedule(mkPod("p", "", ""), uniformCluster(t, nodeNames("n", 300)).Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if res.FeasibleNodes != 300 || res.EvaluatedNodes != 300 {
		t.Errorf("feasible %d evaluated %d, want 300", res.FeasibleNodes, res.EvaluatedNodes)
	}
}

func TestScheduleTiesAreBrokenAtRandom(t *testing.T) {
	snap := uniformCluster(t, nodeNames("n", 4)).Snapshot()
	s := newTestScheduler(t, func(c *Config) { c.Seed = 42 })
	counts := map[string]int{}
	for range 400 {
		res, err := s.Schedule(mkPod("p", "1", "1Gi"), snap)
		if err != nil {
			t.Fatal(err)
		}
		counts[res.Node]++
	}
	// A fixed seed makes this deterministic; a uniform choice gives each
	// node about 100, a biased one (say, always the first) would not.
	for _, n := range nodeNames("n", 4) {
		if counts[n] < 60 || counts[n] > 140 {
			t.Errorf("tied node %s chosen %d of 400 times: %v", n, counts[n], counts)
		}
	}
	// The same seed gives the same choices.
	a, b := newTestScheduler(t, func(c *Config) { c.Seed = 7 }), newTestScheduler(t, func(c *Config) { c.Seed = 7 })
	for i := range 50 {
		ra, _ := a.Schedule(mkPod("p", "1", "1Gi"), snap)
		rb, _ := b.Schedule(mkPod("p", "1", "1Gi"), snap)
		if ra.Node != rb.Node {
			t.Fatalf("cycle %d: same seed chose %q and %q", i, ra.Node, rb.Node)
		}
	}
}

func TestScheduleResult(t *testing.T) {
	nodes := []*corev1.Node{mkNode("a", "4", "8Gi"), mkNode("b", "4", "8Gi"), mkNode("c", "4", "8Gi"), mkNode("d", "4", "8Gi"), mkNode("full", "1", "1Gi")}
	pods := []*corev1.Pod{mkPod("x", "3", "6Gi", onNode("a")), mkPod("y", "2", "4Gi", onNode("b")), mkPod("z", "1", "2Gi", onNode("c"))}
	s := newTestScheduler(t)
	res, err := s.Schedule(mkPod("p", "2", "1Gi"), cacheWith(t, nodes, pods...).Snapshot())
	if err != nil {
		t.Fatal(err)
	}
	if res.Node != "d" || res.FeasibleNodes != 3 || res.EvaluatedNodes != 5 {
		t.Errorf("result %+v, want node d, 3 feasible (a and full lack cpu) of 5 evaluated", res)
	}
	var got []string
	for i, ns := range res.Scores {
		got = append(got, ns.Node)
		if i > 0 && ns.Total > res.Scores[i-1].Total {
			t.Errorf("scores not in descending order: %v", res.Scores)
		}
		want := ns.TaintToleration*3 + ns.NodeAffinity*2 + ns.LeastAllocated + ns.BalancedAllocation + ns.ImageLocality
		if ns.Total != want {
			t.Errorf("%s total %d, want weighted sum %d", ns.Node, ns.Total, want)
		}
	}
	if strings.Join(got, ",") != "d,c,b" {
		t.Errorf("reported %v, want d,c,b", got)
	}
	if res.FilterDuration <= 0 || res.ScoreDuration <= 0 {
		t.Errorf("durations not measured: %+v", res)
	}
	// One feasible node is chosen without scoring.
	res, err = s.Schedule(mkPod("p", "", "", nodeSelector("kubernetes.io/hostname", "x")), cacheWith(t, []*corev1.Node{
		mkNode("n1", "1", "1Gi"), mkNode("n2", "1", "1Gi", labels("kubernetes.io/hostname", "x"))}).Snapshot())
	if err != nil || res.Node != "n2" || res.Scores != nil || res.FeasibleNodes != 1 {
		t.Errorf("single feasible node: %+v, %v", res, err)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
	if w := DefaultConfig().Weights; w != (Weights{TaintToleration: 3, NodeAffinity: 2, LeastAllocated: 1, BalancedAllocation: 1, ImageLocality: 1, PodTopologySpread: 2, InterPodAffinity: 2}) {
		t.Errorf("default weights %+v are not kube-scheduler's", w)
	}
	tests := []struct {
		name   string
		mutate func(*Config)
	}{
		{"negative percentage", func(c *Config) { c.PercentageOfNodesToScore = -1 }},
		{"percentage over 100", func(c *Config) { c.PercentageOfNodesToScore = 101 }},
		{"negative weight", func(c *Config) { c.Weights.ImageLocality = -1 }},
		{"weight over 100", func(c *Config) { c.Weights.TaintToleration = 101 }},
		{"negative report count", func(c *Config) { c.NumScoresToReport = -1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.mutate(&cfg)
			if cfg.Validate() == nil {
				t.Error("Validate accepted an invalid config")
			}
			if _, err := New(cfg); err == nil {
				t.Error("New accepted an invalid config")
			}
		})
	}
}

func TestReportKeepsTheBest(t *testing.T) {
	s := newTestScheduler(t)
	// The feasible nodes a–g with these totals (no score plugins: the
	// totals are the only column).
	totals := []int64{5, 90, 7, 90, 80, 1, 85}
	for i := range totals {
		n := &framework.NodeInfo{}
		n.Reset(string(rune('a' + i)))
		s.feasible = append(s.feasible, n)
	}
	s.columns = [][]int64{totals}
	got := s.report(3) // the tie-break chose d over b
	var names []string
	for _, ns := range got {
		names = append(names, ns.Node)
	}
	if strings.Join(names, ",") != "d,b,g" {
		t.Errorf("report = %v, want d,b,g", names)
	}
}
