package scheduler

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/podflow/podflow/services/stages/scheduler/framework"
	"github.com/podflow/podflow/services/stages/scheduler/plugins"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/imagelocality"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/nodename"

	"github.com/podflow/podflow/proto/corev1"
)

var fakeKey = framework.NewStateKey("PreFilterFake")

// fakePlugin records the extension points it is called at. It rejects
// nodes named in reject, scores nodes by score (raw, normalized to
// double) and can skip its Filter or Score, or fail its PreFilter.
type fakePlugin struct {
	calls                     *[]string
	reject                    map[string]bool
	score                     map[string]int64
	skipFilter, skipScore     bool
	preFilter, preFilterError *framework.Status
}

func (f *fakePlugin) Name() string { return "Fake" }

func (f *fakePlugin) record(s string) { *f.calls = append(*f.calls, s) }

func (f *fakePlugin) PreFilter(state *framework.CycleState, pod *corev1.Pod) *framework.Status {
	f.record("PreFilter " + pod.GetMetadata().GetName())
	state.Write(fakeKey, pod.GetMetadata().GetName())
	switch {
	case f.preFilter != nil:
		return f.preFilter
	case f.skipFilter:
		return framework.SkipStatus()
	}
	return nil
}

func (f *fakePlugin) Filter(state *framework.CycleState, _ *corev1.Pod, n *framework.NodeInfo) *framework.Status {
	f.record("Filter " + n.Name() + " " + state.Read(fakeKey).(string))
	if f.reject[n.Name()] {
		return framework.NewStatus(framework.Unschedulable, "node(s) were rejected by Fake")
	}
	return nil
}

func (f *fakePlugin) PreScore(_ *framework.CycleState, _ *corev1.Pod, feasible []*framework.NodeInfo) *framework.Status {
	f.record("PreScore " + strings.Join(names(feasible), ","))
	if f.skipScore {
		return framework.SkipStatus()
	}
	return nil
}

func (f *fakePlugin) Score(_ *framework.CycleState, _ *corev1.Pod, n *framework.NodeInfo) int64 {
	f.record("Score " + n.Name())
	return f.score[n.Name()]
}

func (f *fakePlugin) ScoreExtensions() framework.ScoreExtensions { return f }

func (f *fakePlugin) NormalizeScore(_ *framework.CycleState, _ *corev1.Pod, scores []int64) *framework.Status {
	f.record("NormalizeScore")
	for i := range scores {
		scores[i] *= 2
	}
	return nil
}

func names(nodes []*framework.NodeInfo) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Name()
	}
	return out
}

// fakeScheduler returns a Scheduler whose profile is the fake alone (with
// the weight) or, with defaults, the default plugins and then the fake.
func fakeScheduler(t *testing.T, f *fakePlugin, weight int64, defaults bool) *Scheduler {
	t.Helper()
	reg := plugins.InTreeRegistry()
	reg["Fake"] = func() (framework.Plugin, error) { return f, nil }
	var specs []PluginSpec
	if defaults {
		specs = DefaultPlugins(DefaultWeights())
	}
	specs = append(specs, PluginSpec{Name: "Fake", Weight: weight})
	return newTestScheduler(t, func(c *Config) { c.Plugins, c.Registry = specs, reg })
}

func TestFrameworkCallsExtensionPoints(t *testing.T) {
	snap := uniformCluster(t, []string{"a", "b", "c"}).Snapshot()
	var calls []string
	f := &fakePlugin{calls: &calls, reject: map[string]bool{"b": true}, score: map[string]int64{"a": 10, "c": 40}}
	res, err := fakeScheduler(t, f, 1, false).Schedule(mkPod("p", "", ""), snap)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"PreFilter p",
		"Filter a p", "Filter b p", "Filter c p", // state written by PreFilter is read by Filter
		"PreScore a,c",
		"Score a", "Score c",
		"NormalizeScore",
	}
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("calls\n%q, want\n%q", calls, want)
	}
	if res.Node != "c" || res.FeasibleNodes != 2 || len(res.Scores) != 2 {
		t.Fatalf("result %+v, want c of 2 feasible", res)
	}
	wantScores := []NodeScore{
		{Node: "c", Total: 80, Plugins: []PluginScore{{"Fake", 80}}},
		{Node: "a", Total: 20, Plugins: []PluginScore{{"Fake", 20}}},
	}
	if !reflect.DeepEqual(res.Scores, wantScores) {
		t.Errorf("scores %+v, want %+v", res.Scores, wantScores)
	}
	if got := res.Scores[0].String(); got != "c=80 (TaintToleration 0, NodeAffinity 0, LeastAllocated 0, BalancedAllocation 0, ImageLocality 0, Fake 80)" {
		t.Errorf("String() = %q", got)
	}
}

func TestFrameworkSkips(t *testing.T) {
	snap := uniformCluster(t, []string{"a", "b"}).Snapshot()
	var calls []string
	f := &fakePlugin{calls: &calls, reject: map[string]bool{"a": true, "b": true}, skipFilter: true, skipScore: true}
	if _, err := fakeScheduler(t, f, 1, false).Schedule(mkPod("p", "", ""), snap); err != nil {
		t.Fatal(err)
	}
	// Filter skipped (the nodes it would reject pass), Score skipped.
	if want := []string{"PreFilter p", "PreScore a,b"}; !reflect.DeepEqual(calls, want) {
		t.Errorf("calls %q, want %q", calls, want)
	}
	// Weight 0: not a score plugin in this profile.
	calls = nil
	f.skipFilter, f.skipScore, f.reject = false, false, nil
	if _, err := fakeScheduler(t, f, 0, false).Schedule(mkPod("p", "", ""), snap); err != nil {
		t.Fatal(err)
	}
	if want := []string{"PreFilter p", "Filter a p", "Filter b p"}; !reflect.DeepEqual(calls, want) {
		t.Errorf("weight 0: calls %q, want %q", calls, want)
	}
}

// TestFrameworkFilterReasonsAreCounted: a plugin's rejection reason is
// counted in kube-scheduler's message beside the in-tree filters' reasons,
// and a node rejected by an earlier filter never reaches a later one.
func TestFrameworkFilterReasonsAreCounted(t *testing.T) {
	nodes := []*corev1.Node{
		mkNode("small", "500m", "8Gi"), mkNode("big-1", "8", "8Gi"), mkNode("big-2", "8", "8Gi"),
		mkNode("gpu", "8", "8Gi", taints(tnt("dedicated", "gpu", "NoSchedule"))),
	}
	var calls []string
	f := &fakePlugin{calls: &calls, reject: map[string]bool{"big-1": true, "big-2": true, "small": true}}
	_, err := fakeScheduler(t, f, 1, true).Schedule(mkPod("p", "1", "1Gi"), cacheWith(t, nodes).Snapshot())
	var fe *framework.FitError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v, want a FitError", err)
	}
	const want = "0/4 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {dedicated: gpu}, 2 node(s) were rejected by Fake. preemption: 0/4 nodes are available: 1 Preemption is not helpful for scheduling, 3 No preemption victims found for incoming pod.."
	if fe.Error() != want {
		t.Errorf("message\n%q, want\n%q", fe.Error(), want)
	}
	slices.Sort(calls)
	if want := []string{"Filter big-1 p", "Filter big-2 p", "PreFilter p"}; !reflect.DeepEqual(calls, want) {
		t.Errorf("calls %q, want %q (the in-tree filters run first)", calls, want)
	}
}

func TestFrameworkPreFilterOutcomes(t *testing.T) {
	snap := uniformCluster(t, []string{"a", "b", "c"}).Snapshot()
	t.Run("rejection rejects every node with kube-scheduler's message", func(t *testing.T) {
		var calls []string
		f := &fakePlugin{calls: &calls, preFilter: framework.NewStatus(framework.UnschedulableAndUnresolvable, "pod has an unsatisfiable constraint")}
		_, err := fakeScheduler(t, f, 1, false).Schedule(mkPod("p", "", ""), snap)
		var fe *framework.FitError
		if !errors.As(err, &fe) {
			t.Fatalf("err = %v, want a FitError", err)
		}
		if want := "0/3 nodes are available: pod has an unsatisfiable constraint."; fe.Error() != want {
			t.Errorf("message %q, want %q", fe.Error(), want)
		}
		if len(fe.NodeReasons) != 3 || !reflect.DeepEqual(fe.NodeReasons["b"], []string{"pod has an unsatisfiable constraint"}) {
			t.Errorf("node reasons %v", fe.NodeReasons)
		}
		if want := []string{"PreFilter p"}; !reflect.DeepEqual(calls, want) {
			t.Errorf("calls %q, want %q", calls, want)
		}
	})
	t.Run("error fails the cycle", func(t *testing.T) {
		var calls []string
		boom := errors.New("boom")
		f := &fakePlugin{calls: &calls, preFilter: framework.AsStatus(boom)}
		if _, err := fakeScheduler(t, f, 1, false).Schedule(mkPod("p", "", ""), snap); !errors.Is(err, boom) {
			t.Errorf("err = %v, want boom", err)
		}
	})
}

func TestConfigValidatePlugins(t *testing.T) {
	tests := []struct {
		name  string
		specs []PluginSpec
	}{
		{"unknown plugin", []PluginSpec{{Name: "VolumeBinding"}}},
		{"enabled twice", []PluginSpec{{Name: nodename.NodeNameName}, {Name: nodename.NodeNameName}}},
		{"weight over 100", []PluginSpec{{Name: imagelocality.ImageLocalityName, Weight: 101}}},
		{"negative weight", []PluginSpec{{Name: imagelocality.ImageLocalityName, Weight: -1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Plugins = tt.specs
			if cfg.Validate() == nil {
				t.Error("Validate accepted an invalid profile")
			}
		})
	}
}

// batchTestSetup returns a random source seeded with seed, a 200-node
// varied cluster from it and the default profile.
func batchTestSetup(t *testing.T, seed uint64) (*rand.Rand, *framework.Snapshot, *frameworkImpl) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed+1))
	snap := cacheWith(t, variedCluster(rng, 200)).Snapshot()
	fw, err := newFramework(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	return rng, snap, fw
}

// TestBatchScorersMatchScore: every in-tree BatchScorer gives what its
// Score gives, node by node.
func TestBatchScorersMatchScore(t *testing.T) {
	rng, snap, fw := batchTestSetup(t, 7)
	for i := range 50 {
		pod := variedPod(rng, i)
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, &corev1.Toleration{Key: "spot", Operator: "Exists"})
		for _, e := range fw.score {
			if e.batch == nil {
				continue
			}
			var state framework.CycleState
			state.Reset(snap)
			if e.preScore != nil && !e.preScore.PreScore(&state, pod, snap.Nodes()).IsSuccess() {
				continue
			}
			batch := make([]int64, snap.NumNodes())
			e.batch.ScoreNodes(&state, pod, snap.Nodes(), batch)
			for j, n := range snap.Nodes() {
				if s := e.pl.Score(&state, pod, n); s != batch[j] {
					t.Fatalf("pod %d, %s on %s: Score %d, ScoreNodes %d", i, e.name, n.Name(), s, batch[j])
				}
			}
		}
	}
}

// TestBatchFiltersMatchFilter: every in-tree BatchFilter gives what its
// Filter gives, node by node, and leaves the nodes an earlier filter
// rejected alone.
func TestBatchFiltersMatchFilter(t *testing.T) {
	rng, snap, fw := batchTestSetup(t, 9)
	earlier := framework.NewStatus(framework.Unschedulable, "rejected by an earlier filter")
	for i := range 50 {
		pod := variedPod(rng, i)
		for _, e := range fw.filter {
			if _, ok := e.batch.(perNodeFilter); ok {
				t.Fatalf("in-tree filter %s has no BatchFilter", e.pl.Name())
			}
			var state framework.CycleState
			state.Reset(snap)
			if pf, ok := e.pl.(framework.PreFilterPlugin); ok && !pf.PreFilter(&state, pod).IsSuccess() {
				continue
			}
			nodes := snap.Nodes()
			statuses := make([]*framework.Status, len(nodes))
			for j := range statuses {
				if rng.IntN(4) == 0 {
					statuses[j] = earlier
				}
			}
			want := slices.Clone(statuses)
			for j, n := range nodes {
				if want[j] == nil {
					want[j] = e.pl.Filter(&state, pod, n)
				}
			}
			for lo := 0; lo < len(nodes); lo += filterChunk {
				hi := min(lo+filterChunk, len(nodes))
				e.batch.FilterNodes(&state, pod, nodes[lo:hi], statuses[lo:hi])
			}
			for j, n := range nodes {
				if statuses[j] != want[j] {
					t.Fatalf("pod %d, %s on %s: Filter (or the earlier rejection) %v, FilterNodes %v", i, e.pl.Name(), n.Name(), want[j].Reasons(), statuses[j].Reasons())
				}
			}
		}
	}
}

// filterOneByOne is the filter phase as a plain loop, node after node,
// each through every filter's Filter until one rejects it: the reference
// the chunked, batched phase must match. It returns how many nodes it
// evaluated, the feasible ones and the rejected ones' reasons.
func filterOneByOne(s *Scheduler, pod *corev1.Pod, snap *framework.Snapshot) (int, []string, map[string][]string) {
	s.state.Reset(snap)
	filters, st := s.fw.runPreFilter(&s.state, pod, nil, nil)
	if st != nil {
		return 0, nil, nil
	}
	all := snap.NodeList
	want := numFeasibleNodesToFind(s.cfg.PercentageOfNodesToScore, len(all))
	var feasible []string
	failed := map[string][]string{}
	i, j := 0, s.next%len(all)
nodes:
	for ; i < len(all) && len(feasible) < want; i++ {
		n := all[j]
		j = (j + 1) % len(all)
		for _, f := range filters {
			if st := f.pl.Filter(&s.state, pod, n); st != nil {
				failed[n.Name()] = st.Reasons()
				continue nodes
			}
		}
		feasible = append(feasible, n.Name())
	}
	s.next = j
	return i, feasible, failed
}

// TestBatchFilteringMatchesPerNode: a cycle that filters in chunks, with
// the plugins' BatchFilters or with Filter node by node, evaluates the
// same nodes, finds the same feasible ones (so picks the same node),
// starts the next cycle at the same node and fails with the same message
// as the plain loop, on clusters where few nodes fit (small chunks) and
// where most do.
func TestBatchFilteringMatchesPerNode(t *testing.T) {
	for _, tt := range []struct {
		name  string
		nodes int
		cpu   string
	}{
		{"most nodes fit", 1000, ""},
		{"few nodes fit", 1000, "9"},
		{"a small cluster", 60, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(11, 12))
			nodes := variedCluster(rng, tt.nodes)
			batched, perNode, ref := newTestScheduler(t), newTestScheduler(t), newTestScheduler(t)
			for i := range perNode.fw.filter {
				perNode.fw.filter[i].batch = perNodeFilter{perNode.fw.filter[i].pl}
			}
			c, snap := cacheWith(t, nodes), framework.NewSnapshot()
			var failures int
			for i := range 300 {
				pod := variedPod(rng, i)
				if tt.cpu != "" && i%2 == 0 {
					pod = mkPod(fmt.Sprintf("big-%d", i), tt.cpu, "1Gi")
				}
				c.UpdateSnapshot(snap)
				evaluated, feasible, failed := filterOneByOne(ref, pod, snap)
				failures += len(failed)
				for _, s := range []*Scheduler{batched, perNode} {
					res, err := s.Schedule(pod, snap)
					var fe *framework.FitError
					switch {
					case errors.As(err, &fe):
						if len(feasible) != 0 || !reflect.DeepEqual(fe.NodeReasons, failed) {
							t.Fatalf("pod %d: FitError %v, one by one %d feasible, %v", i, fe.NodeReasons, len(feasible), failed)
						}
					case err != nil:
						t.Fatal(err)
					case res.FeasibleNodes != len(feasible) || res.EvaluatedNodes != evaluated || !slices.Contains(feasible, res.Node):
						t.Fatalf("pod %d: %s (%d feasible of %d), one by one %d feasible of %d", i, res.Node, res.FeasibleNodes, res.EvaluatedNodes, len(feasible), evaluated)
					case !slices.Equal(names(s.feasible), feasible):
						t.Fatalf("pod %d: feasible %v, one by one %v", i, names(s.feasible), feasible)
					}
					if s.next != ref.next {
						t.Fatalf("pod %d: next cycle starts at %d, one by one at %d", i, s.next, ref.next)
					}
				}
				if len(feasible) > 0 {
					if err := c.AssumePod(pod, feasible[0]); err != nil {
						t.Fatal(err)
					}
				}
			}
			if failures == 0 {
				t.Fatal("no node was rejected: the test checks nothing")
			}
		})
	}
}

// errorFilter fails on one node.
type errorFilter struct{ node string }

func (errorFilter) Name() string { return "ErrorFilter" }

func (f errorFilter) Filter(_ *framework.CycleState, _ *corev1.Pod, n *framework.NodeInfo) *framework.Status {
	if n.Name() == f.node {
		return framework.AsStatus(errors.New("boom on " + f.node))
	}
	return nil
}

// TestFilterErrorFailsTheCycle: a filter's Error fails the cycle when the
// cycle reaches its node, and not when it has found its feasible nodes
// before it.
func TestFilterErrorFailsTheCycle(t *testing.T) {
	tests := []struct {
		name    string
		nodes   int
		wantErr bool
	}{
		{"reached", 3, true},
		{"not reached", 200, false}, // 100 feasible nodes found from node 0; the error is on the last node
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			names := nodeNames("n", tt.nodes)
			reg := plugins.InTreeRegistry()
			reg["ErrorFilter"] = func() (framework.Plugin, error) { return errorFilter{node: names[len(names)-1]}, nil }
			specs := append(DefaultPlugins(DefaultWeights()), PluginSpec{Name: "ErrorFilter"})
			s := newTestScheduler(t, func(c *Config) { c.Plugins, c.Registry = specs, reg })
			_, err := s.Schedule(mkPod("p", "100m", "100Mi"), uniformCluster(t, names).Snapshot())
			if got := err != nil; got != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if tt.wantErr && !strings.Contains(err.Error(), "boom on "+names[len(names)-1]) {
				t.Errorf("err = %v", err)
			}
		})
	}
}
